package command

import (
	"io"
	"os"
	"sync"

	"golang.org/x/term"
)

// diagWriter is where progress and notes go (stderr). The demo writes to it
// from its clients and its services' background work at once, so a write
// holds a lock: lines never interleave, and a writer that is not safe for
// concurrent use (a test's bytes.Buffer) is not raced.
type diagWriter struct {
	mu sync.Mutex
	w  io.Writer
	// tty is the terminal under w, if w is one: progress bars draw on it,
	// everything else writes a line at a time.
	tty *os.File
}

func newDiag(w io.Writer) *diagWriter {
	d := &diagWriter{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		d.tty = f
	}
	return d
}

func (d *diagWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.w.Write(p)
}

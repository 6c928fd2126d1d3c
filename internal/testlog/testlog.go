package testlog

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer is an io.Writer that keeps what is written, safe for concurrent
// use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// New returns a logger that writes slog's text lines, every level
// included, to the returned Buffer.
func New() (*slog.Logger, *Buffer) {
	b := &Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

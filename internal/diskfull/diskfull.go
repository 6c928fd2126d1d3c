package diskfull

import (
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"testing"
)

// Fill writes a file into dir, the directory of a disk from Mount, until
// the disk has no more than leave bytes left (none for 0: the next write
// that needs space fails), and returns a function that removes it (also
// run at the test's end). Fill fails the test if the disk does not fill
// up with ENOSPC.
func Fill(t testing.TB, dir string, leave int64) (free func()) {
	t.Helper()
	f, err := os.CreateTemp(dir, "filler-*")
	if err != nil {
		t.Fatalf("diskfull: %v", err)
	}
	defer func() { _ = f.Close() }()
	chunk := make([]byte, 64<<10)
	for {
		_, err = f.Write(chunk)
		if err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("diskfull: filling %s: %v, want ENOSPC", dir, err)
		}
		if err == nil {
			continue
		}
		if len(chunk) == 1 {
			break
		}
		chunk = chunk[:len(chunk)/2] // the last bytes, a smaller write at a time
	}
	if leave > 0 {
		end, err := f.Seek(0, io.SeekCurrent)
		if err == nil {
			err = f.Truncate(max(end-leave, 0))
		}
		if err != nil {
			t.Fatalf("diskfull: %v", err)
		}
	}
	name := f.Name()
	free = sync.OnceFunc(func() {
		if err := os.Remove(name); err != nil {
			t.Errorf("diskfull: freeing %s: %v", dir, err)
		}
	})
	t.Cleanup(free)
	return free
}

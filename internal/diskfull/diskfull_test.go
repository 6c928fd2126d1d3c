package diskfull_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/diskfull"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A filled disk refuses the next byte with ENOSPC, and takes writes again
// once freed.
func TestFillAndFree(t *testing.T) {
	dir := diskfull.Mount(t, 256<<10)
	require := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Fatalf(format, args...)
		}
	}
	require(!full(t, dir), "a fresh disk is full")
	free := diskfull.Fill(t, dir, 0)
	require(full(t, dir), "a filled disk takes a byte")
	err := os.WriteFile(filepath.Join(dir, "late"), make([]byte, 4096), 0o600)
	require(errors.Is(err, syscall.ENOSPC), "a write on a full disk: %v, want ENOSPC", err)
	free()
	require(!full(t, dir), "a freed disk is still full")
	free = diskfull.Fill(t, dir, 64<<10)
	require(os.WriteFile(filepath.Join(dir, "room"), make([]byte, 32<<10), 0o600) == nil, "the room left is not there")
	err = os.WriteFile(filepath.Join(dir, "late"), make([]byte, 64<<10), 0o600)
	require(errors.Is(err, syscall.ENOSPC), "a write past the room left: %v, want ENOSPC", err)
	free()
	require(os.WriteFile(filepath.Join(dir, "late"), make([]byte, 4096), 0o600) == nil, "a write on a freed disk fails")
}

// full reports whether a write of one byte into dir fails for want of space.
func full(t testing.TB, dir string) bool {
	t.Helper()
	name := filepath.Join(dir, "probe")
	f, err := os.Create(name)
	if errors.Is(err, syscall.ENOSPC) {
		return true
	}
	if err != nil {
		t.Fatalf("diskfull: %v", err)
	}
	defer func() { _ = os.Remove(name) }()
	defer func() { _ = f.Close() }()
	_, err = io.WriteString(f, "x")
	if err == nil {
		err = f.Sync()
	}
	return errors.Is(err, syscall.ENOSPC)
}

package diskfull

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes (rounded up to pages by the kernel)
// over a new directory under t.TempDir and returns the directory; it is
// unmounted when the test ends, after the cleanups the test registers
// later (a database's close among them). It skips the test where the
// mount is refused.
func Mount(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("diskfull: %v", err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("diskfull: mounting a tmpfs needs root (CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("diskfull: unmount %s: %v", dir, err)
		}
	})
	return dir
}

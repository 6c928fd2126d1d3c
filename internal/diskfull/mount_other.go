//go:build !linux

package diskfull

import (
	"runtime"
	"testing"
)

// Mount skips the test: a disk of a chosen size is a tmpfs mount, which
// this package makes on Linux only.
func Mount(t testing.TB, _ int64) string {
	t.Helper()
	t.Skipf("diskfull: a disk that fills up is a tmpfs mount, made on Linux only (this is %s)", runtime.GOOS)
	return ""
}

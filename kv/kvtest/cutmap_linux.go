package kvtest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// CutShortMap returns two pages of memory mapped from a file of the test's
// own, which it then cuts to nothing: reading them is a memory fault
// (SIGBUS), raised as a panic where debug.SetPanicOnFault is set, as in a
// kv transaction. It stands for a map of the caller's (a lookup file a
// handler maps, truncated beneath it), which kv must not take for its
// database's file (kv.DB.IsFault). Linux only: the map is removed at the
// test's end.
func CutShortMap(t testing.TB) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "own.map"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // the map outlives the descriptor
	size := 2 * os.Getpagesize()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED) // #nosec G115 -- a descriptor fits in an int
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(data) })
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	return data
}

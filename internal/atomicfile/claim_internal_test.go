package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withoutLinks makes the package see a file system without hard links
// (vfat, some FUSE file systems) until the test ends.
func withoutLinks(t *testing.T) {
	t.Helper()
	link = func(oldname, newname string) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EPERM}
	}
	t.Cleanup(func() { link = os.Link })
}

// On a file system without hard links, Create and Temp publish by rename:
// the file is whole at its name, an existing one is still refused, and
// no temporary file is left.
func TestWithoutHardLinks(t *testing.T) {
	withoutLinks(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "copy")
	write := func(s string) func(*os.File) (int64, error) {
		return func(f *os.File) (int64, error) {
			n, err := f.WriteString(s)
			return int64(n), err
		}
	}
	if _, err := Create(path, write("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(path, write("second")); !errors.Is(err, os.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want os.ErrExist", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "first" {
		t.Fatalf("%s holds %q (%v), want the first copy", path, b, err)
	}
	if _, err := Replace(path, write("third")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "third" {
		t.Fatalf("%s holds %q (%v), want the replacement", path, b, err)
	}
	f, err := Temp(dir, "spool")
	if err != nil {
		t.Fatal(err)
	}
	if !isTemp(filepath.Base(f.Name()), ".tmp") {
		t.Fatalf("Temp made %s", f.Name())
	}
	if removed, err := RemoveStale(dir); err != nil || len(removed) != 0 {
		t.Fatalf("RemoveStale took a live writer's file: %v %v", removed, err)
	}
	_ = f.Close() // first: Windows removes no open file
	_ = os.Remove(f.Name())
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "copy" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("left in the directory: %s", strings.Join(names, ", "))
	}
}

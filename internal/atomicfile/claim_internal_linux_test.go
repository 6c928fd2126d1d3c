package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A writer whose file is drawn the name of another's live temporary file
// (their random parts alike) never takes that name: the live file keeps
// its contents, and the newcomer gets errNameTaken, on which Temp draws
// again. A rename would have put the newcomer's file in its place.
func TestClaimNeverTakesALiveFilesName(t *testing.T) {
	for _, links := range []bool{true, false} {
		t.Run(map[bool]string{true: "links", false: "no links"}[links], func(t *testing.T) {
			if !links {
				withoutLinks(t)
			}
			dir := t.TempDir()
			live := filepath.Join(dir, ".copy.oncekv-42.tmp")
			if err := os.WriteFile(live, []byte("the live writer's"), 0o600); err != nil {
				t.Fatal(err)
			}
			staging := filepath.Join(dir, ".copy.oncekv-42.new")
			f, err := os.OpenFile(staging, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			if _, err := f.WriteString("the newcomer's"); err != nil {
				t.Fatal(err)
			}
			if g, err := claim(f, live); !errors.Is(err, errNameTaken) {
				if g != nil {
					_ = g.Close()
				}
				t.Fatalf("claim over a live file: %v, want errNameTaken", err)
			}
			if b, err := os.ReadFile(live); err != nil || string(b) != "the live writer's" {
				t.Fatalf("the live file holds %q (%v)", b, err)
			}
		})
	}
}

// A claimed file is under its final name only, locked.
func TestClaimMovesTheFileToItsName(t *testing.T) {
	dir := t.TempDir()
	staging := filepath.Join(dir, ".copy.oncekv-7.new")
	f, err := os.OpenFile(staging, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, ".copy.oncekv-7.tmp")
	g, err := claim(f, final)
	if err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	if _, err := os.Lstat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staging name is left: %v", err)
	}
	if !named(g) {
		t.Fatalf("%s does not lead to the claimed file", final)
	}
	if removed, err := RemoveStale(dir); err != nil || len(removed) != 0 {
		t.Fatalf("RemoveStale took the claimed (locked) file: %v %v", removed, err)
	}
}

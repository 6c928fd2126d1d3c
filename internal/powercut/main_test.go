//go:build linux

package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// The model the power-loss test relies on: a cut keeps what was synced, a
// name only once its directory was synced, and fails every call after it.
func TestACutKeepsWhatWasSynced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	mnt, out := t.TempDir(), filepath.Join(t.TempDir(), "image")
	in, cmds := io.Pipe()
	answers, w := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(mnt, "", in, w); _ = w.Close() }()
	lines := bufio.NewScanner(answers)
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("powercut ended: %v", <-done)
		}
		return lines.Text()
	}
	if got := next(); got != "ready" {
		t.Fatalf("first answer %q", got)
	}

	write := func(name, data string, off int64, sync bool) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		if _, err := f.WriteAt([]byte(data), off); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncDir := func() {
		t.Helper()
		d, err := os.Open(mnt)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Close() }()
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	write("kept", "synced", 0, true)
	write("moved", "synced", 0, true)
	write("stays", "synced", 0, true)
	syncDir()
	rename := func(from, to string) {
		t.Helper()
		if err := os.Rename(filepath.Join(mnt, from), filepath.Join(mnt, to)); err != nil {
			t.Fatal(err)
		}
	}
	rename("moved", "renamed")
	syncDir()
	rename("stays", "renamed unsynced")    // its directory is not synced again
	write("kept", "unsynced", 2048, false) // past the synced size, in a sector of its own
	write("unnamed", "synced, its name not", 0, true)

	if _, err := io.WriteString(cmds, "cut 1 "+out+"\n"); err != nil {
		t.Fatal(err)
	}
	account := next()
	if _, err := os.ReadFile(filepath.Join(mnt, "kept")); !errors.Is(err, syscall.EIO) {
		t.Errorf("a read after the cut: %v, want EIO", err)
	}
	got, err := os.ReadFile(filepath.Join(out, "kept"))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(account, " 0 of 1 unsynced sectors kept"):
		if string(got) != "synced" {
			t.Errorf("kept holds %q, want what was synced alone (%s)", got, account)
		}
	case strings.Contains(account, " 1 of 1 unsynced sectors kept"):
		if len(got) != 2048+len("unsynced") || string(got[:6]) != "synced" || string(got[2048:]) != "unsynced" {
			t.Errorf("kept holds %q, want the synced data and the kept sector (%s)", got, account)
		}
	default:
		t.Errorf("account %q: one unsynced sector was written", account)
	}
	for name, want := range map[string]bool{"renamed": true, "moved": false, "stays": true, "renamed unsynced": false} {
		if _, err := os.Stat(filepath.Join(out, name)); (err == nil) != want {
			t.Errorf("%q after the cut: %v, want it there: %t", name, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "unnamed")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file whose directory was not synced since it was created: %v, want it gone", err)
	}
	if _, err := io.WriteString(cmds, "exit\n"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

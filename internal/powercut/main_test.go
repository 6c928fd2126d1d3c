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
	mnt, cmds, next, done := mount(t)
	out := filepath.Join(t.TempDir(), "image")

	write := func(name, data string, off int64, sync bool) {
		t.Helper()
		if err := writeAt(filepath.Join(mnt, name), data, off, sync); err != nil {
			t.Fatal(err)
		}
	}
	syncMnt := func() {
		t.Helper()
		if err := syncDir(mnt); err != nil {
			t.Fatal(err)
		}
	}
	write("kept", "synced", 0, true)
	write("moved", "synced", 0, true)
	write("stays", "synced", 0, true)
	syncMnt()
	rename := func(from, to string) {
		t.Helper()
		if err := os.Rename(filepath.Join(mnt, from), filepath.Join(mnt, to)); err != nil {
			t.Fatal(err)
		}
	}
	rename("moved", "renamed")
	syncMnt()
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

// failat fails one sync, which makes nothing durable, and the power
// stays on: reads go on, and the next sync makes the data durable.
func TestAFailedSyncMakesNothingDurable(t *testing.T) {
	for _, syncAgain := range []bool{false, true} {
		mnt, cmds, next, done := mount(t)
		send := func(cmd, want string) {
			t.Helper()
			if _, err := io.WriteString(cmds, cmd+"\n"); err != nil {
				t.Fatal(err)
			}
			if got := next(); !strings.Contains(got, want) {
				t.Fatalf("%s: answer %q, want %q", cmd, got, want)
			}
		}
		path := filepath.Join(mnt, "f")
		if err := writeAt(path, "synced", 0, true); err != nil {
			t.Fatal(err)
		}
		if err := syncDir(mnt); err != nil { // its name
			t.Fatal(err)
		}
		send("failat 1", "armed")
		if err := writeAt(path, "unsynced", 2048, true); !errors.Is(err, syscall.EIO) {
			t.Fatalf("the armed sync: %v, want EIO", err)
		}
		if got := next(); got != "failed: a sync" {
			t.Fatalf("answer %q", got)
		}
		if got, err := os.ReadFile(path); err != nil || string(got[2048:]) != "unsynced" {
			t.Fatalf("a read after the failed sync: %q %v, want what was written", got, err)
		}
		unsynced := " of 1 unsynced sectors" // the sector the failed sync did not make durable
		if syncAgain {
			if err := writeAt(path, "unsynced", 2048, true); err != nil {
				t.Fatalf("the sync after the failed one: %v", err)
			}
			unsynced = " of 0 unsynced sectors"
		}
		send("cut 1 "+filepath.Join(t.TempDir(), "image"), unsynced)
		if _, err := io.WriteString(cmds, "exit\n"); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// mount runs powercut on a new directory, empty, and returns it, the
// commands' input, a function that reads the next answer, and run's end.
func mount(t *testing.T) (mnt string, cmds io.Writer, next func() string, done <-chan error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	mnt = t.TempDir()
	in, w := io.Pipe()
	answers, aw := io.Pipe()
	ended, unmounted := make(chan error, 1), make(chan struct{})
	go func() { ended <- run(mnt, "", in, aw); _ = aw.Close(); close(unmounted) }()
	t.Cleanup(func() { _ = w.Close(); <-unmounted }) // an unfinished test: the end of the input unmounts
	lines := make(chan string, 16)                   // read at once: an answer is written under the filesystem's lock
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(answers); s.Scan(); {
			lines <- s.Text()
		}
	}()
	next = func() string {
		t.Helper()
		line, ok := <-lines
		if !ok {
			t.Fatalf("powercut ended: %v", <-ended)
		}
		return line
	}
	if got := next(); got != "ready" {
		t.Fatalf("first answer %q", got)
	}
	return mnt, w, next, ended
}

// syncDir syncs the directory dir.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// writeAt writes data at off in the file at path, made if need be, and
// syncs it if sync.
func writeAt(path, data string, off int64, sync bool) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

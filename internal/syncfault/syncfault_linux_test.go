package syncfault_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/syncfault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// In the child, the second fdatasync fails with EIO and the others do not.
func TestTheChosenSyncFails(t *testing.T) {
	if !syncfault.Child() {
		syncfault.Run(t, "2")
		return
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for i, want := range []error{nil, syscall.EIO, nil} {
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); !errors.Is(err, want) && err != want {
			t.Fatalf("sync %d: %v, want %v", i+1, err, want)
		}
	}
}

// In the child, the second fdatasync waits before it syncs and succeeds;
// the others do not wait. (A lower bound on a delay strace injects: a busy
// machine makes the call slower, never faster.)
func TestTheChosenSyncIsSlow(t *testing.T) {
	const d = 300 * time.Millisecond
	if !syncfault.Child() {
		syncfault.Delay(t, "2", d)
		return
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var took []time.Duration
	for range 3 {
		if _, err := f.WriteString("x"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	if took[1] < d {
		t.Fatalf("the second sync took %s, want at least the injected %s (all: %v)", took[1], d, took)
	}
}

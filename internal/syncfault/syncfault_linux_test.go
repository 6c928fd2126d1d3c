package syncfault_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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

package goid

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIDTellsGoroutinesApart(t *testing.T) {
	here := ID()
	if here == 0 {
		t.Fatal("no number for this goroutine")
	}
	if again := ID(); again != here {
		t.Fatalf("%d, then %d on the same goroutine", here, again)
	}
	other := make(chan uint64)
	go func() { other <- ID() }()
	if there := <-other; there == here || there == 0 {
		t.Fatalf("another goroutine's number %d, this one's %d", there, here)
	}
}

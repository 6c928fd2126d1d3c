package testwait

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestReceiveReturnsTheValue(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := Receive(t, ch, "seven"); got != 7 {
		t.Fatalf("got %d", got)
	}
}

func TestUntilSkipsToTheValueSought(t *testing.T) {
	ch := make(chan int, 3)
	ch <- 1
	ch <- 2
	ch <- 3
	if got := Until(t, ch, func(v int) bool { return v > 1 }, "more than one"); got != 2 {
		t.Fatalf("got %d", got)
	}
	if len(ch) != 1 {
		t.Fatalf("%d left, want 1", len(ch))
	}
}

// fatal records a Fatalf by panicking with its message, which failure
// recovers: Fatalf must not return.
type fatal struct{ testing.TB }

type fatalMsg string

func (fatal) Helper() {}

func (fatal) Fatalf(format string, args ...any) { panic(fatalMsg(fmt.Sprintf(format, args...))) }

func failure(fn func()) (msg string) {
	defer func() {
		if m, ok := recover().(fatalMsg); ok {
			msg = string(m)
		}
	}()
	fn()
	return "no failure"
}

func TestReceiveFailsAfterItsBoundSayingWhat(t *testing.T) {
	f := fatal{t}
	got := failure(func() { receive(f, make(chan int), 10*time.Millisecond, []any{"the relay's ", 2, "nd pass"}) })
	if want := "testwait: waited 10ms for the relay's 2nd pass"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	got = failure(func() { receive(f, make(chan int), time.Millisecond, nil) })
	if want := "testwait: waited 1ms for a value that never came"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

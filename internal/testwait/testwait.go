package testwait

import (
	"fmt"
	"testing"
	"time"
)

// Bound is how long Receive waits. It is generous: what is awaited takes
// milliseconds, and a test machine shared by a race-detector build of every
// package can be slow by two orders of magnitude; a defect never sends.
const Bound = time.Minute

// Receive returns the next value from ch, or fails t (FailNow) after Bound
// with what, formatted by fmt.Sprint, as the value it waited for.
func Receive[T any](t testing.TB, ch <-chan T, what ...any) T {
	t.Helper()
	return receive(t, ch, Bound, what)
}

// Until receives from ch until a value satisfies ok and returns it, each
// receive bounded as Receive's.
func Until[T any](t testing.TB, ch <-chan T, ok func(T) bool, what ...any) T {
	t.Helper()
	for {
		if v := receive(t, ch, Bound, what); ok(v) {
			return v
		}
	}
}

func receive[T any](t testing.TB, ch <-chan T, bound time.Duration, what []any) T {
	t.Helper()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("testwait: waited %s for %s", bound, describe(what))
		panic("unreachable: Fatalf ends the test's goroutine")
	}
}

func describe(what []any) string {
	if len(what) == 0 {
		return "a value that never came"
	}
	return fmt.Sprint(what...)
}

package loop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/internal/loop"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFinal = errors.New("final")

// A pass that panics is recovered as its error, with zero stats, logged
// with its stack; the loop then waits AfterPanic (here far longer than the
// test) or a wake-up before the next pass, and ends at a Final error.
func TestPanickingPassIsItsError(t *testing.T) {
	t.Parallel()
	logger, logs := testlog.New()
	wake := make(chan struct{})
	type result struct {
		n   int
		err error
	}
	results := make(chan result, 10)
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- loop.Run(context.Background(), wake, func(context.Context) (int, time.Duration, error) {
			calls++
			switch calls {
			case 1:
				panic("pass bug")
			case 2:
				return 2, 0, nil
			}
			return 3, time.Hour, errFinal
		}, func(n int, err error) { results <- result{n, err} },
			loop.Config{Name: "test loop", Final: []error{errFinal}, AfterPanic: time.Hour, Logger: logger})
	}()

	r := testwait.Receive(t, results, "the panicking pass's result")
	require.Zero(t, r.n)
	require.EqualError(t, r.err, "oncekv: a pass of the test loop panicked: pass bug")
	require.Contains(t, logs.String(), `level=ERROR msg="test loop pass panicked" panic="pass bug"`)
	require.Contains(t, logs.String(), "TestPanickingPassIsItsError", "the stack names the pass")

	select {
	case wake <- struct{}{}: // received only by a loop waiting after the panic
	case <-done:
		t.Fatal("the loop ran on after the panic without waiting")
	}
	require.Equal(t, result{2, nil}, testwait.Receive(t, results, "the second pass's result"))
	require.Equal(t, result{3, errFinal}, testwait.Receive(t, results, "the third pass's result"))
	require.ErrorIs(t, testwait.Receive(t, done, "the loop's end"), errFinal)
}

// A loop sleeping an hour between passes runs its next pass as soon as
// Refusing closes (the database refused calls), and ends at that pass's
// Final error. A pass then that is not final does not make the closed
// channel spin the loop: the next waits as the pass asked.
func TestRefusingRunsAPassAtOnce(t *testing.T) {
	t.Parallel()
	for _, final := range []bool{true, false} {
		refusing := make(chan struct{})
		passes := make(chan int, 10)
		calls := 0
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- loop.Run(ctx, nil, func(context.Context) (int, time.Duration, error) {
				calls++
				if calls == 2 && final {
					return calls, time.Hour, errFinal
				}
				return calls, time.Hour, nil
			}, func(n int, _ error) { passes <- n }, loop.Config{Name: "test loop", Final: []error{errFinal}, Refusing: refusing})
		}()
		require.Equal(t, 1, testwait.Receive(t, passes, "the first pass"))
		close(refusing)
		require.Equal(t, 2, testwait.Receive(t, passes, "the pass after Refusing closed"))
		if final {
			require.ErrorIs(t, testwait.Receive(t, done, "the loop's end"), errFinal)
			cancel()
			continue
		}
		cancel()
		require.ErrorIs(t, testwait.Receive(t, done, "the loop's end"), context.Canceled)
		require.Empty(t, passes, "a pass after the one Refusing made")
	}
}

package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// Config is what a loop does besides its passes.
type Config struct {
	// Name names the loop in its panics' errors and log lines ("outbox
	// relay").
	Name string
	// Final are the errors that end the loop (a closed database: no later
	// pass could do anything).
	Final []error
	// AfterPanic is how long the loop waits after a pass that panicked.
	AfterPanic time.Duration
	// Logger, when not nil, logs a pass's panic, with its stack.
	Logger *slog.Logger
	// Refusing, when not nil, is closed when the database starts
	// refusing calls (kv.DB.Done): the loop then runs its next pass at
	// once, which meets the refusal, one of Final, and ends the loop,
	// instead of sleeping through the wait its last pass asked for.
	Refusing <-chan struct{}
}

// Run calls pass until ctx ends, and passes every result to onPass (when
// not nil). After each pass it waits for whichever comes first: the wait
// the pass asked for (0 runs the next pass at once), a signal on wake (nil:
// none), cfg.Refusing closing, or the end of ctx. It returns ctx.Err(),
// after the pass in progress finishes, or the error of a pass that is one
// of cfg.Final, after onPass has it. It starts no goroutine.
//
// A pass that panics is recovered: its error is the panic's, logged with
// its stack through cfg.Logger, and the next pass comes after
// cfg.AfterPanic (or a wake-up). A background loop runs the service's own
// code (publishers, providers, observers) on data it meets again after
// every restart: a panic that ended the process would end it again at
// each.
func Run[S any](ctx context.Context, wake <-chan struct{}, pass func(context.Context) (S, time.Duration, error), onPass func(S, error), cfg Config) error {
	refusing := cfg.Refusing
	for {
		st, wait, err := guarded(ctx, pass, cfg)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onPass != nil {
			onPass(st, err)
		}
		for _, f := range cfg.Final {
			if errors.Is(err, f) {
				return err
			}
		}
		if wait <= 0 {
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
			t.Stop()
		case <-refusing:
			t.Stop()
			refusing = nil // one pass at once: a closed channel is always ready
		case <-t.C:
		}
	}
}

// guarded runs pass, turning a panic into its error.
func guarded[S any](ctx context.Context, pass func(context.Context) (S, time.Duration, error), cfg Config) (st S, wait time.Duration, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero S
			st, wait, err = zero, cfg.AfterPanic, fmt.Errorf("oncekv: a pass of the %s panicked: %v", cfg.Name, p)
			if cfg.Logger != nil {
				cfg.Logger.Error(cfg.Name+" pass panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}
	}()
	return pass(ctx)
}

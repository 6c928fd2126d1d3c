// Package loop is the one background run loop of oncekv's workers (the
// retention sweeper, the outbox relay, the intent reconciler): run a pass,
// report it, wait for a wake-up, a timer or the end of the context.
package loop

import (
	"context"
	"errors"
	"time"
)

// Run calls pass until ctx ends, and passes every result to onPass (when
// not nil). After each pass it waits for whichever comes first: the wait
// the pass asked for (0 runs the next pass at once), a signal on wake (nil:
// none), or the end of ctx. It returns ctx.Err(), after the pass in
// progress finishes, or the error of a pass that is one of final (a closed
// database: no later pass could do anything), after onPass has it. It
// starts no goroutine.
func Run[S any](ctx context.Context, wake <-chan struct{}, pass func(context.Context) (S, time.Duration, error), onPass func(S, error), final ...error) error {
	for {
		st, wait, err := pass(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if onPass != nil {
			onPass(st, err)
		}
		for _, f := range final {
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
		case <-t.C:
		}
	}
}

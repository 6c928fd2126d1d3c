package sideeffect

import (
	"bytes"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/oncekv/oncekv/internal/loop"
	"github.com/oncekv/oncekv/kv"
)

// RunStats reports what one reconciler pass did.
type RunStats struct {
	Examined       int // intents picked up
	Succeeded      int
	Failed         int
	Unknown        int // outcome still unknown: backed off
	NeedsAttention int // parked after too many attempts
	Skipped        int // busy in this process, stale, or already final
	Errors         int // storage or completion errors (retried later)
}

// maxPerPass bounds how many intents one pass picks up.
const maxPerPass = 1000

// RunOnce finds every intent that is due — pending past its grace period,
// unknown past its backoff, or held by an attempt whose lease ran out or
// whose process died — and runs one attempt of each, asking the provider
// for the key's status before anything else. It is what the background loop
// runs, exposed for the CLI and tests.
func (x *Executor) RunOnce(ctx context.Context) (RunStats, error) {
	var ids []string
	err := x.db.View(ctx, func(tx kv.Tx) error {
		seen := map[string]bool{}
		for _, e := range dueIdx.Due(tx, x.db.Clock().Now(), nil, maxPerPass) {
			seen[string(e.Key)] = true
			ids = append(ids, string(e.Key))
		}
		// Attempts left running by a dead process: bbolt's lock means only
		// this process writes, so any other owner is gone. With several
		// writers, another owner is another replica: its attempt becomes
		// due when its lease ends, through the due index.
		if ib := inflightNS.Bucket(tx); ib != nil && x.db.Traits().SingleWriter {
			inc := x.db.Incarnation()
			c := ib.Cursor()
			for k, owner := c.First(); k != nil && len(ids) < maxPerPass; k, owner = c.Next() {
				if !bytes.Equal(owner, inc[:]) && !seen[string(k)] {
					ids = append(ids, string(k))
				}
			}
		}
		return nil
	})
	if err != nil {
		return RunStats{}, err
	}

	var (
		mu    sync.Mutex
		stats = RunStats{Examined: len(ids)}
		wg    sync.WaitGroup
		work  = make(chan string)
	)
	for range min(x.cfg.Concurrency, len(ids)) {
		wg.Go(func() {
			for id := range work {
				in, err := x.reconcile(ctx, id)
				mu.Lock()
				switch {
				case isRejected(err):
					stats.Skipped++
				case err != nil:
					stats.Errors++
					x.cfg.Logger.Warn("reconcile intent", "id", id, "error", err)
				case in.State == StateSucceeded:
					stats.Succeeded++
				case in.State == StateFailed:
					stats.Failed++
				case in.State == StateNeedsAttention:
					stats.NeedsAttention++
				default:
					stats.Unknown++
				}
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		select {
		case work <- id:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return stats, ctx.Err()
}

// reconcile runs one intent's attempt for RunOnce. A panic is the
// attempt's error, logged: the process, whose every restart would meet the
// same intent, goes on, and the intent is tried again when due. The
// provider's and the completions' panics are errors before they get here
// (callProvider, completion), logged with their own stacks; this catches
// the rest (an observer's, say).
func (x *Executor) reconcile(ctx context.Context, id string) (in *Intent, err error) {
	defer func() {
		if p := recover(); p != nil {
			x.cfg.Logger.Error("reconcile intent panicked", "id", id, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			in, err = nil, fmt.Errorf("sideeffect: reconciling intent %s panicked: %v", id, p)
		}
	}()
	return x.execute(ctx, id, true, nil)
}

// Run is the background reconciler: it runs a pass, then sleeps until the
// next intent is due, a new intent is committed (Wake), or PollInterval
// passes, whichever is first. It returns when ctx ends (with ctx.Err()),
// after the pass in progress finishes, or with kv.ErrClosed from the first
// pass after the database closed; it starts no goroutine that outlives it.
// onPass, if not nil, receives each pass's stats (for metrics). A panic in
// a pass outside an intent's attempt (whose panics are that intent's
// error) is logged with its stack, is that pass's error, and the next
// pass comes PollInterval later.
func (x *Executor) Run(ctx context.Context, onPass func(RunStats, error)) error {
	return loop.Run(ctx, x.wake, func(ctx context.Context) (RunStats, time.Duration, error) {
		stats, err := x.RunOnce(ctx)
		if stats.Examined >= maxPerPass {
			return stats, 0, err // more to do
		}
		wait := x.cfg.PollInterval
		if err == nil {
			_ = x.db.View(ctx, func(tx kv.Tx) error {
				if next, ok := dueIdx.First(tx); ok {
					wait = min(wait, max(next.Sub(x.db.Clock().Now()), 0))
				}
				return nil
			})
		}
		return stats, wait, err
	}, onPass, loop.Config{Name: "intent reconciler", Final: []error{kv.ErrClosed}, AfterPanic: x.cfg.PollInterval, Logger: x.cfg.Logger})
}

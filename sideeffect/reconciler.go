package sideeffect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
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
	// Held counts the due intents passed over: ones whose last attempt
	// could not start (no handler for their kind, a damaged record),
	// left alone for PollInterval.
	Held int
}

// maxPerPass bounds how many intents one pass picks up.
const maxPerPass = 1000

// RunOnce finds every intent that is due — pending past its grace period,
// unknown past its backoff, or held by an attempt whose lease ran out or
// whose process died — and runs one attempt of each, asking the provider
// for the key's status before anything else. It is what the background loop
// runs, exposed for the CLI and tests.
//
// An intent whose attempt fails before it starts (no handler for its kind,
// a record that does not decode: it stays due) is logged and left alone
// by this executor's later passes for PollInterval: it would otherwise be
// picked again at once, by every pass, each taking the writer.
func (x *Executor) RunOnce(ctx context.Context) (RunStats, error) {
	var ids []string
	now := x.db.Clock().Now()
	held := x.held.until(now)
	passed := 0
	err := x.db.View(ctx, func(tx kv.Tx) error {
		ids, passed = ids[:0], 0 // a read run again (etcd) starts afresh
		seen := map[string]bool{}
		var after []byte
		for len(ids) < maxPerPass {
			due := dueIdx.Due(tx, now, after, maxPerPass)
			for _, e := range due {
				switch _, h := held[string(e.Key)]; {
				case h:
					passed++
				case len(ids) < maxPerPass:
					seen[string(e.Key)] = true
					ids = append(ids, string(e.Key))
				}
			}
			if len(due) < maxPerPass {
				break
			}
			after = due[len(due)-1].Cursor
		}
		// Attempts left running by a dead process: bbolt's lock means only
		// this process writes, so any other owner is gone. With several
		// writers, another owner is another replica: its attempt becomes
		// due when its lease ends, through the due index.
		if ib := inflightNS.Bucket(tx); ib != nil && x.db.Traits().SingleWriter {
			inc := x.db.Incarnation()
			c := ib.Cursor()
			for k, owner := c.First(); k != nil && len(ids) < maxPerPass; k, owner = c.Next() {
				_, h := held[string(k)]
				if !bytes.Equal(owner, inc[:]) && !seen[string(k)] && !h {
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
		mu     sync.Mutex
		stats  = RunStats{Examined: len(ids), Held: passed}
		wg     sync.WaitGroup
		work   = make(chan string)
		failed = map[string][]failure{} // error text, the intent's ID taken out → the intents it failed
		order  []string                 // those texts, first met first
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
					x.held.hold(id, x.db.Clock().Now().Add(x.cfg.PollInterval))
					text := strings.ReplaceAll(err.Error(), id, "ID")
					if _, seen := failed[text]; !seen {
						order = append(order, text)
					}
					failed[text] = append(failed[text], failure{id, err})
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
	// One line per distinct failure, not per intent: a deploy that dropped
	// a handler strands every intent of its kind, and each fails the same
	// way at every PollInterval.
	for _, text := range order {
		if fs := failed[text]; len(fs) == 1 {
			x.cfg.Logger.Warn("reconcile intent", "id", fs[0].id, "error", fs[0].err, "again_in", x.cfg.PollInterval)
		} else {
			x.cfg.Logger.Warn("reconcile intents", "intents", len(fs), "first_id", fs[0].id, "error", text, "again_in", x.cfg.PollInterval)
		}
	}
	return stats, ctx.Err()
}

// failure is an intent a pass could not reconcile, and why.
type failure struct {
	id  string
	err error
}

// holds are intents the reconciler leaves alone until a time.
type holds struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// hold leaves id alone until t.
func (h *holds) hold(id string, t time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]time.Time{}
	}
	h.m[id] = t
}

// until returns the intents held at now, with their times, and forgets
// those whose time has come.
func (h *holds) until(now time.Time) map[string]time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]time.Time, len(h.m))
	for id, t := range h.m {
		if now.Before(t) {
			out[id] = t
		} else {
			delete(h.m, id)
		}
	}
	return out
}

// nextDue returns when the next pass has something to do: the time of the
// first intent in the due index not held, or the end of a hold before it.
func (x *Executor) nextDue(tx kv.Tx, now time.Time) (time.Time, bool) {
	held := x.held.until(now)
	var next time.Time
	found := false
	_ = dueIdx.ForEach(tx, func(at time.Time, id []byte) error {
		until, h := held[string(id)]
		if h {
			at = until
		}
		if !found || at.Before(next) {
			next, found = at, true
		}
		if !h {
			return errStopWalk // every later entry is due later
		}
		return nil
	})
	return next, found
}

var errStopWalk = errors.New("sideeffect: stop")

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
// after the pass in progress finishes, or, as soon as the database
// refuses calls (kv.DB.Done), with the refusal from a pass made then:
// kv.ErrClosed once it is closed, an error matching kv.ErrSyncFailed once
// a commit's sync (the pass's own, or any other writer's) failed after its
// meta page was written. It starts no goroutine that outlives it.
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
				now := x.db.Clock().Now()
				if next, ok := x.nextDue(tx, now); ok {
					wait = min(wait, max(next.Sub(now), 0))
				}
				return nil
			})
		}
		return stats, wait, err
	}, onPass, loop.Config{Name: "intent reconciler", Final: []error{kv.ErrClosed, kv.ErrSyncFailed, kv.ErrReadFailed}, AfterPanic: x.cfg.PollInterval, Logger: x.cfg.Logger, Refusing: x.db.Done()})
}

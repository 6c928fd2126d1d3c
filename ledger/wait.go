package ledger

import (
	"context"
	"sync"
	"time"

	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/kv"
)

// waiters lets callers that met an in-progress claim wait for it to finish
// without polling: every completion and release closes the channel of its
// key after commit. Waiting is in-process only; across processes there is
// only one writer (bbolt's file lock), so there is nobody else to notify.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waitEntry
}

type waitEntry struct {
	ch   chan struct{}
	refs int
}

// register returns a channel closed when key is next completed or released,
// and a function to call when done waiting.
func (w *waiters) register(key string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*waitEntry{}
	}
	e := w.m[key]
	if e == nil {
		e = &waitEntry{ch: make(chan struct{})}
		w.m[key] = e
	}
	e.refs++
	return e.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		e.refs--
		if e.refs == 0 && w.m[key] == e {
			delete(w.m, key)
		}
	}
}

// notify wakes everyone waiting on key.
func (w *waiters) notify(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.m[key]; e != nil {
		close(e.ch)
		delete(w.m, key)
	}
}

// notifyOnCommit arranges for waiters on rk to be woken after tx commits.
func (l *Ledger) notifyOnCommit(tx interface{ OnCommit(func()) }, scope, key string) {
	rk := scope + "\x00" + key
	tx.OnCommit(func() { l.waiters.notify(rk) })
}

// Wait blocks until the claim described by ip (from a call that met an
// in-progress key) may have finished: its key was completed or released in
// this process, its lease ran out, or until passed. It returns false when the
// caller should give up (until passed, or ctx ended) and true when it should
// try again. The managed calls with Request.Wait use it; so does code that
// builds its own flow on the Tx forms (sideeffect.Executor.Perform, the HTTP
// middleware's external routes). Waiting is in-process: it is woken by this
// process's completions and otherwise by the lease's end.
func (l *Ledger) Wait(ctx context.Context, ip *InProgressError, until time.Time) bool {
	if ip == nil || ip.Version == 0 {
		return false // nothing to wait on: not a claim this ledger can watch
	}
	l.waited.Add(1)
	ch, done := l.waiters.register(ip.Scope + "\x00" + ip.Key)
	defer done()

	// The completion may have committed between the caller's look-up and
	// registration above; look again now that a notification cannot be missed.
	var cur *Record
	_ = l.db.View(ctx, func(tx kv.Tx) error {
		_, cur, _ = l.load(tx, ip.Scope, ip.Key, false)
		return nil
	})
	if cur == nil || cur.Status != StatusInProgress || cur.Version != ip.Version {
		return true
	}

	d := time.Until(until)
	if lease := cur.LeaseExpiresAt.Sub(l.now()); lease < d {
		d = max(lease, 0) // wake when the lease runs out: a takeover becomes possible
	}
	if d <= 0 {
		return time.Now().Before(until)
	}
	// With several writers the completion may come from another process:
	// watch the record too, and look again now and then, since a watch
	// begun after the look above can miss a change made in between.
	var changed <-chan struct{}
	if tr := l.db.Traits(); !tr.SingleWriter {
		if tr.Watch != nil {
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			bucket, key := recstore.KeyOf(recordSpec, ip.Scope, ip.Key)
			changed = tr.Watch(wctx, bucket, key)
		}
		d = min(d, time.Second)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-changed:
		return true
	case <-t.C:
		return time.Now().Before(until)
	case <-ctx.Done():
		return false
	}
}

// Waited returns how many times a duplicate request waited (Wait was
// entered) since the ledger was created, for metrics and tests.
func (l *Ledger) Waited() int64 { return l.waited.Load() }

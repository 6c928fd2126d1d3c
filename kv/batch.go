package kv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/oncekv/oncekv/internal/failpoint"
)

// Batch runs fn in a read-write transaction shared with other concurrent
// Batch calls (group commit): many callers, one commit, one fsync. It returns
// once the transaction that includes fn has committed (nil, or the commit
// error) or fn's own error is known.
//
// fn may run more than once: when another call in the same batch fails, the
// batch is rolled back and run again without it. fn must therefore have no
// effect outside the transaction, and must reset anything it captures (a
// result, a response) at the start of every run. Register work that must
// follow the commit with Tx.OnCommit; it runs only for the run that commits.
//
// Batching policy: there is no fixed delay by default. The first caller
// starts a transaction at once; callers that arrive while its functions run
// join it (up to Options.MaxBatchSize), and those that arrive during its
// commit (and fsync) queue up and form the next batch. Batches grow with
// load, and a lone caller pays nothing. Options.GatherCallers also waits for
// the callers of the previous batch to come back (a worker pool then
// commits in one batch, not two alternating halves), and
// Options.MaxBatchDelay adds a fixed wait.
//
// If fn returns an error, it is returned and fn's writes are rolled back
// (see Reject for outcomes that should not fail the batch); if
// fn panics, the panic is re-raised in the calling goroutine, with its value
// but not the stack it was raised on (as with bbolt's DB.Batch: the batch
// recovers it to roll back and answer its other calls); recover inside fn
// to log where it panicked. A ctx that ends while the call waits for its
// batch cancels it: Batch returns ctx.Err() at once, and fn never runs.
// Once its batch has taken it in, the call is not interrupted.
func (db *DB) Batch(ctx context.Context, fn func(Tx) error) error {
	if err := db.writable(ctx); err != nil {
		return err
	}
	if !db.traits.GroupCommit {
		return db.Update(ctx, fn)
	}
	b := &db.batch
	c := callPool.Get().(*batchCall)
	c.ctx, c.fn = ctx, fn

	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.leading
	b.leading = true
	if !lead && (len(b.queue) >= db.opts.MaxBatchSize || (b.want > 0 && len(b.queue) >= b.want)) {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()

	for {
		if lead {
			b.lead()
		}
		r, queued := b.wait(c)
		if !queued {
			// Its context ended while it was queued: taken out, it never ran.
			c.ctx, c.fn = nil, nil
			callPool.Put(c)
			return ctx.Err()
		}
		if r.lead {
			lead = true
			continue
		}
		// The final result: nothing more is sent to c, which goes back to
		// the pool (its channel empty).
		c.ctx, c.fn = nil, nil
		callPool.Put(c)
		switch {
		case r.solo:
			// fn failed after other calls of its batch; its error may have been
			// caused by their writes, so find its real outcome alone.
			return closedErr(unreject(db.commit(ctx, oneCall, func(t Tx) error { return fn(db.guard(t)) })))
		case r.panic != nil:
			panic(r.panic.Value)
		}
		return r.err
	}
}

// wait returns c's next message; or, when c's context ends while c is
// still queued (behind a batch that runs long, a writer held), takes c
// out of the queue and reports false at once: c never ran, and never
// will. A call already taken into a batch waits for its outcome.
func (b *batcher) wait(c *batchCall) (batchResult, bool) {
	ended := c.ctx.Done()
	if ended == nil {
		return <-c.done, true
	}
	select {
	case r := <-c.done:
		return r, true
	case <-ended:
	}
	b.mu.Lock()
	out := b.dequeue(c)
	b.mu.Unlock()
	if !out {
		return <-c.done, true // taken into a batch, or answered: its outcome comes
	}
	return batchResult{}, false
}

// dequeue takes c out of the queue, if it is there, and reports whether
// it was. Leadership handed to c while it was queued (the only message a
// queued call can have: take answers the calls it removes) passes on to
// the next queued call, or ends. b.mu is held.
func (b *batcher) dequeue(c *batchCall) bool {
	i := slices.Index(b.queue, c)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	select {
	case <-c.done:
		if len(b.queue) > 0 {
			b.queue[0].done <- batchResult{lead: true}
		} else {
			b.leading, b.handed = false, false // the next leader comes to an idle batcher
		}
	default:
	}
	return true
}

type batchCall struct {
	ctx  context.Context
	fn   func(Tx) error
	done chan batchResult // buffered (1): each message is received before the next is sent
}

// callPool pools batch calls with their channels: a call receives exactly
// one final result, after which nothing refers to it.
var callPool = sync.Pool{New: func() any { return &batchCall{done: make(chan batchResult, 1)} }}

type batchResult struct {
	err   error
	panic *panicked
	lead  bool // the receiver now leads the next batch
	solo  bool // the receiver must run its function on its own
}

// batcher implements group commit with leader hand-off: the caller that
// finds no batch running becomes the leader, takes the queue, runs it as one
// transaction (taking in, before it commits, the calls queued while it ran)
// and, when it finishes, passes leadership to the first caller that queued
// meanwhile. Invariant: leading is false only when the queue is
// empty. No goroutine is started, so there is nothing to stop on Close.
type batcher struct {
	db      *DB
	mu      sync.Mutex
	queue   []*batchCall
	leading bool
	full    chan struct{} // wakes a waiting leader when the queue is full, or holds b.want
	want    int           // a gathering leader waits for this many queued calls (0: none)

	// The leader's state: only the leader uses it, and leadership passes
	// under mu, so it is reused from batch to batch without allocating.
	batch    []*batchCall // the calls of the batch being run
	rejected []error
	failed   int
	res      batchResult
	answered int            // calls of the batch answered so far
	txFn     func(Tx) error // b.runTx, bound once
	callsFn  func() int     // len(b.batch), bound once: the observer's count
	gathering
}

// gathering is the leader's state for Options.GatherCallers, passed with
// leadership like the rest.
type gathering struct {
	released int           // calls the last batch answered
	arrived  int           // calls queued during the last batch, before it answered its own
	handed   bool          // this leader was handed the queue, not first to an idle batcher
	ended    time.Time     // when the last batch finished
	took     time.Duration // how long it ran (transaction, commit, fsync)
	skip     int           // batches left that do not wait
	backoff  int           // batches not to wait after the next wait that times out
	timer    *time.Timer
	maxWait  time.Duration // maxGatherWait (tests raise it)
}

var errBatchCallFailed = errors.New("kv: batch call failed")

func (b *batcher) lead() {
	if d := b.db.opts.MaxBatchDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-b.full:
			t.Stop()
		}
	} else if b.db.opts.GatherCallers {
		b.gather()
	}

	start := time.Now()
	b.batch, b.answered, b.arrived = b.batch[:0], 0, 0
	b.mu.Lock()
	b.take(b.db.opts.MaxBatchSize)
	b.mu.Unlock()
	ran := false
	defer func() {
		if !ran {
			b.abandon()
		}
	}()
	b.run()
	ran = true
	b.released, b.ended = b.answered, time.Now()
	b.took = b.ended.Sub(start)
	b.finish()
}

// abandon runs while a panic raised outside every call's function (by an
// observer's Commit, or by the store itself) unwinds the leader: it
// answers the calls of the batch that have no answer yet with
// errCommitPanicked and hands leadership on, so that the panic ends the
// leader's own call, raised with its stack, and not every later one
// (a leader whose caller recovers, as net/http does, would otherwise
// leave the batcher leading for ever and each later call queued).
func (b *batcher) abandon() {
	for _, c := range b.batch {
		c.done <- batchResult{err: errCommitPanicked} // the leader's own, if here, is never read
	}
	b.answered += len(b.batch)
	b.released, b.ended, b.took = b.answered, time.Now(), 0
	b.want = 0
	b.finish()
}

// errCommitPanicked answers the calls of a batch whose commit panicked
// outside their functions: the panic may have come after the commit (an
// observer's Commit) or in it.
var errCommitPanicked = fmt.Errorf("kv: the batch's commit panicked outside the calls' functions (in an observer's Commit, or in the store); it may have applied: %w", ErrCommitUnknown)

// finish forgets the batch that ran and hands leadership to the first
// queued call, if any.
func (b *batcher) finish() {
	// No pointers to finished calls (they are pooled) or their errors.
	clear(b.batch[:cap(b.batch)])
	clear(b.rejected)
	b.batch, b.res = b.batch[:0], batchResult{}

	b.mu.Lock()
	b.handed = len(b.queue) > 0
	if b.handed {
		b.queue[0].done <- batchResult{lead: true}
	} else {
		b.leading = false
	}
	b.mu.Unlock()
}

// gather waits, for Options.GatherCallers, until the callers the last
// batch answered have queued again (behind those that came during it), or
// half the last batch's time has passed (5 ms at most). It does not wait
// after a batch of one, nor when the batcher has been idle longer than the
// last batch took (its callers are not on their way back), nor while
// backing off.
func (b *batcher) gather() {
	switch {
	case b.released < 2, !b.handed && time.Since(b.ended) > b.took:
		return
	case b.skip > 0:
		b.skip--
		return
	}
	b.mu.Lock()
	// The callers that came during the last batch, and its own coming back.
	want := min(b.arrived+b.released, b.db.opts.MaxBatchSize)
	if len(b.queue) >= want {
		b.mu.Unlock()
		return
	}
	b.want = want
	select {
	case <-b.full: // a stale wake-up
	default:
	}
	b.mu.Unlock()

	wait := min(b.took/2, b.maxWait)
	if b.timer == nil {
		b.timer = time.NewTimer(wait)
	} else {
		b.timer.Reset(wait)
	}
	select {
	case <-b.full:
		b.timer.Stop()
		b.backoff = 0
	case <-b.timer.C:
		b.backoff = min(max(2*b.backoff, 1), maxGatherBackoff)
		b.skip = b.backoff
	}
	b.mu.Lock()
	b.want = 0
	b.mu.Unlock()
}

const (
	// maxGatherWait bounds a gathering wait, whatever the last batch took
	// (a slow function, a stalled disk).
	maxGatherWait = 5 * time.Millisecond
	// maxGatherBackoff bounds the batches that skip gathering after waits
	// that timed out.
	maxGatherBackoff = 64
)

// take moves up to room queued calls, oldest first, to the end of
// b.batch, answering at once those whose context has ended. b.mu is held.
// It reports whether it moved any.
func (b *batcher) take(room int) (took bool) {
	n := min(len(b.queue), room)
	for _, c := range b.queue[:n] {
		if err := c.ctx.Err(); err != nil {
			c.done <- batchResult{err: err} // buffered and empty: does not block
			b.answered++
			continue
		}
		b.batch = append(b.batch, c)
		took = true
	}
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return took
}

// run runs b.batch as one transaction, with the calls it takes in while it
// runs (extend), and answers them all, counting them in b.answered. A call
// that fails is answered (or sent to run alone) and the rest run again.
func (b *batcher) run() {
	for len(b.batch) > 0 {
		b.failed, b.res = -1, batchResult{}
		b.rejected = growErrs(b.rejected, len(b.batch))
		err := b.db.commit(context.Background(), b.callsFn, b.txFn)
		calls, failed, res := b.batch, b.failed, b.res
		switch {
		case failed < 0:
			if b.db.opts.GatherCallers {
				b.mu.Lock()
				b.arrived = len(b.queue)
				b.mu.Unlock()
			}
			err = closedErr(err)
			if err == nil {
				failpoint.Inject(failpoint.KVBatchAfterCommit)
			}
			for i, c := range calls {
				if err == nil && b.rejected[i] != nil {
					c.done <- batchResult{err: b.rejected[i]}
					continue
				}
				c.done <- batchResult{err: err}
			}
			b.answered += len(calls)
			return
		case failed == 0:
			// It ran first, on exactly the state it would have seen alone:
			// its outcome is final.
			calls[0].done <- res
		default:
			calls[failed].done <- batchResult{solo: true}
		}
		// Removed in place: b.batch keeps its backing array from batch to
		// batch (lead clears it whole).
		b.batch = append(calls[:failed], calls[failed+1:]...)
		b.answered++
	}
}

// growErrs returns s with length n, keeping its values (the rejections
// noted before a batch took in more calls).
func growErrs(s []error, n int) []error {
	if cap(s) < n {
		t := make([]error, n, 2*n)
		copy(t, s)
		return t
	}
	return s[:n]
}

// extend takes into the running batch the calls queued since it started,
// up to Options.MaxBatchSize: they commit with it instead of waiting for
// the next commit. It reports whether it took any.
func (b *batcher) extend() bool {
	room := b.db.opts.MaxBatchSize - len(b.batch)
	if room <= 0 {
		return false
	}
	b.mu.Lock()
	took := b.take(room)
	b.mu.Unlock()
	if took {
		b.rejected = growErrs(b.rejected, len(b.batch))
	}
	return took
}

// runTx is the transaction function of a batch: it runs the calls of
// b.batch in order, noting rejections in b.rejected, and stops at the first
// call that fails (b.failed, b.res).
func (b *batcher) runTx(t Tx) error {
	tx := b.db.guard(t)
	for i := 0; i < len(b.batch) || b.extend(); i++ {
		c := b.batch[i]
		p, err := safeCall(c.fn, tx)
		if p != nil && b.db.IsFault(p.Value) { // the file could not be read: every call is refused
			return b.db.readFaulted(p.Value.(runtime.Error))
		}
		b.rejected[i] = nil
		if r, ok := err.(*rejection); ok {
			b.rejected[i] = r.err // wrote nothing: the batch goes on
			continue
		}
		if err != nil || p != nil {
			b.failed, b.res = i, batchResult{err: err, panic: p}
			return errBatchCallFailed
		}
	}
	failpoint.Inject(failpoint.KVBatchBeforeCommit)
	return nil
}

// Reject wraps an outcome that a transaction function decided without
// writing anything: a version mismatch, a duplicate, a key in use. Returned
// from a function run by Batch, it does not fail the batch (which would roll
// back and re-run every other call in it); the batch commits the others and
// Batch returns err. Returned from a function run by Update, the transaction
// is rolled back and Update returns err. The function must not have written
// anything before it rejects.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return &rejection{err: err}
}

type rejection struct{ err error }

func (r *rejection) Error() string { return r.err.Error() }
func (r *rejection) Unwrap() error { return r.err }

// unreject returns the error a rejection wraps, or err itself.
func unreject(err error) error {
	if r, ok := err.(*rejection); ok {
		return r.err
	}
	return err
}

func safeCall(fn func(Tx) error, tx Tx) (p *panicked, err error) {
	defer func() {
		if r := recover(); r != nil {
			p = &panicked{Value: r}
		}
	}()
	return nil, fn(tx)
}

// panicked carries the value a batched function panicked with, to re-raise
// it in the caller's goroutine.
type panicked struct{ Value any }

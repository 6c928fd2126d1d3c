package kv

import (
	"github.com/oncekv/oncekv/internal/rerun"
	"github.com/oncekv/oncekv/internal/testwait"

	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/observe"
)

func openInternal(t *testing.T, o *Options) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "b.db"), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// leaderRunning reports that a batch is running with nothing queued: its
// leader has taken its own call in. The point to queue calls behind it
// from: leading alone is set before the leader takes the queue, and a
// call queued in between joins the leader's batch instead (CI saw
// TestBatchRejectionDoesNotRerun wait for ever on that, under load).
func (b *batcher) leaderRunning() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leading && len(b.queue) == 0
}

// waitQueued waits until n calls are queued behind the running batch.
func waitQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return db.batch.queued() == n }, 10*time.Second, time.Millisecond)
}

func put(key string) func(Tx) error {
	return func(tx Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), []byte("v"))
	}
}

func get(t *testing.T, db *DB, key string) []byte {
	var v []byte
	require.NoError(t, db.View(context.Background(), func(tx Tx) error {
		if b := tx.Bucket([]byte("b")); b != nil {
			v = append([]byte(nil), b.Get([]byte(key))...)
		}
		return nil
	}))
	if len(v) == 0 {
		return nil
	}
	return v
}

// Calls that arrive while a batch commits are grouped into the next one, and
// a failing call is isolated: its writes are rolled back, its error returned,
// the others commit.
func TestBatchGroupsWaitingCallsAndIsolatesFailures(t *testing.T) {
	t.Parallel()
	oneRun(t)
	db := openInternal(t, nil)
	ctx := context.Background()

	release := make(chan struct{})
	firstDone := make(chan error)
	go func() {
		firstDone <- db.Batch(ctx, func(tx Tx) error {
			<-release
			return put("first")(tx)
		})
	}()
	require.Eventually(t, func() bool {
		db.batch.mu.Lock()
		defer db.batch.mu.Unlock()
		return db.batch.leading && len(db.batch.queue) == 0
	}, 10*time.Second, time.Millisecond)

	const n = 20
	var commits atomic.Int32
	var runs [n]atomic.Int32
	boom := errors.New("boom")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = db.Batch(ctx, func(tx Tx) error {
				runs[i].Add(1)
				tx.OnCommit(func() { commits.Add(1) })
				if err := put(fmt.Sprint("k", i))(tx); err != nil {
					return err
				}
				if i == 7 {
					return boom
				}
				return nil
			})
		})
		waitQueued(t, db, i+1) // queue in order: call i is the batch's i-th
	}
	close(release)
	require.NoError(t, testwait.Receive(t, firstDone, "the first call's answer"))
	wg.Wait()

	for i := range n {
		if i == 7 {
			require.ErrorIs(t, errs[i], boom)
			require.Nil(t, get(t, db, "k7"), "a failed call's writes roll back")
			continue
		}
		require.NoError(t, errs[i])
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint("k", i)))
	}
	require.Equal(t, []byte("v"), get(t, db, "first"))
	require.EqualValues(t, n-1, commits.Load(), "commit hooks fire once per committed call, never for rolled-back runs")
	// The calls before the failing one ran twice (the rolled-back run and the
	// committed one): fn may run more than once.
	require.EqualValues(t, 2, runs[0].Load())
}

func TestBatchPanicIsRaisedInCaller(t *testing.T) {
	t.Parallel()
	db := openInternal(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	go func() {
		_ = db.Batch(ctx, func(tx Tx) error { <-release; return nil })
	}()
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)

	var wg sync.WaitGroup
	var okErr error
	var recovered any
	wg.Go(func() { okErr = db.Batch(ctx, put("ok")) })
	waitQueued(t, db, 1)
	wg.Go(func() {
		defer func() { recovered = recover() }()
		_ = db.Batch(ctx, func(tx Tx) error {
			_ = put("panicker")(tx)
			panic("handler bug")
		})
	})
	waitQueued(t, db, 2)
	close(release)
	wg.Wait()
	require.NoError(t, okErr)
	require.Equal(t, "handler bug", recovered)
	require.Equal(t, []byte("v"), get(t, db, "ok"))
	require.Nil(t, get(t, db, "panicker"))
}

func TestBatchCanceledWhileQueued(t *testing.T) {
	t.Parallel()
	db := openInternal(t, nil)
	release := make(chan struct{})
	go func() {
		_ = db.Batch(context.Background(), func(tx Tx) error { <-release; return nil })
	}()
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- db.Batch(c, put("never")) }()
	waitQueued(t, db, 1)
	cancel()
	// Answered at once, while the batch ahead of it still runs: a call
	// queued behind a writer held long (or for ever) keeps its deadline.
	require.ErrorIs(t, testwait.Receive(t, done, "the canceled call's answer"), context.Canceled)
	require.Zero(t, db.batch.queued(), "taken out of the queue")
	close(release)
	require.NoError(t, db.Batch(context.Background(), put("after")))
	require.Nil(t, get(t, db, "never"))
	require.Equal(t, []byte("v"), get(t, db, "after"))
}

// A queued call whose context ends just as leadership is handed to it
// passes leadership on to the next queued call, or ends it: a lost
// hand-off would leave the batcher leading with nobody to lead, every
// later call queued for ever.
func TestCanceledCallPassesLeadershipOn(t *testing.T) {
	t.Parallel()
	db := openInternal(t, nil)
	b := &db.batch
	call := func() *batchCall { return &batchCall{ctx: context.Background(), done: make(chan batchResult, 1)} }
	c1, c2 := call(), call()
	b.mu.Lock()
	b.leading, b.handed, b.queue = true, true, []*batchCall{c1, c2}
	c1.done <- batchResult{lead: true} // what finish sends to the queue's head
	require.True(t, b.dequeue(c1))
	require.Equal(t, []*batchCall{c2}, b.queue)
	select {
	case r := <-c2.done:
		require.Equal(t, batchResult{lead: true}, r, "the next call leads")
	default:
		b.mu.Unlock()
		t.Fatal("leadership was lost with the canceled call")
	}
	require.True(t, b.leading)

	c2.done <- batchResult{lead: true}
	require.True(t, b.dequeue(c2))
	require.Empty(t, b.queue)
	require.False(t, b.leading, "nobody left to lead")
	require.False(t, b.handed, "the next leader finds the batcher idle (GatherCallers does not wait for it)")
	require.False(t, b.dequeue(c2), "not queued")
	b.mu.Unlock()
}

// Under load, calls whose deadlines pass while they wait and calls that
// run mix freely: each call is answered, one that returns its context's
// error wrote nothing, one that returns nil wrote its key, and the
// batcher ends idle.
func TestBatchDeadlinesUnderLoad(t *testing.T) {
	t.Parallel()
	db := openInternal(t, &Options{NoSync: true})
	var wg sync.WaitGroup
	results := make([]error, 400)
	for i := range results {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i%7)*100*time.Microsecond)
				defer cancel()
			}
			results[i] = db.Batch(ctx, func(tx Tx) error {
				time.Sleep(50 * time.Microsecond) // a batch takes a while
				return put(fmt.Sprint(i))(tx)
			})
		})
	}
	wg.Wait()
	canceled := 0
	for i, err := range results {
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded, "%d", i)
			require.Nil(t, get(t, db, fmt.Sprint(i)), "%d: a canceled call wrote nothing", i)
			canceled++
			continue
		}
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint(i)), "%d", i)
	}
	t.Logf("%d of %d calls passed their deadline", canceled, len(results))
	db.batch.mu.Lock()
	defer db.batch.mu.Unlock()
	require.False(t, db.batch.leading)
	require.Empty(t, db.batch.queue)
}

func TestBatchSizeCapAndDelay(t *testing.T) {
	t.Parallel()
	db := openInternal(t, &Options{MaxBatchSize: 3, MaxBatchDelay: time.Millisecond, NoSync: true})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { require.NoError(t, db.Batch(context.Background(), put(fmt.Sprint(i)))) })
	}
	wg.Wait()
	for i := range 50 {
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint(i)))
	}
	db.batch.mu.Lock()
	require.False(t, db.batch.leading)
	require.Empty(t, db.batch.queue)
	db.batch.mu.Unlock()
}

func TestBatchManyConcurrent(t *testing.T) {
	t.Parallel()
	for _, gather := range []bool{false, true} {
		t.Run(fmt.Sprint("gather=", gather), func(t *testing.T) {
			t.Parallel()
			testBatchManyConcurrent(t, openInternal(t, &Options{NoSync: true, GatherCallers: gather}))
		})
	}
}

func testBatchManyConcurrent(t *testing.T, db *DB) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				require.NoError(t, db.Batch(context.Background(), put(fmt.Sprint(g, "-", i))))
			}
		})
	}
	wg.Wait()
	require.NoError(t, db.View(context.Background(), func(tx Tx) error {
		n := 0
		c := tx.Bucket([]byte("b")).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			n++
		}
		require.Equal(t, 1600, n)
		return nil
	}))
}

// A rejected call does not fail its batch: the others commit without a
// re-run, and the rejected caller gets its error.
func TestBatchRejectionDoesNotRerun(t *testing.T) {
	t.Parallel()
	oneRun(t)
	db := openInternal(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	go func() { _ = db.Batch(ctx, func(tx Tx) error { <-release; return nil }) }()
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)

	taken := errors.New("taken")
	var runs atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			errs[i] = db.Batch(ctx, func(tx Tx) error {
				runs.Add(1)
				if i == 1 {
					return Reject(taken)
				}
				return put(fmt.Sprint("r", i))(tx)
			})
		})
		waitQueued(t, db, i+1)
	}
	close(release)
	wg.Wait()
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], taken)
	require.Equal(t, taken, errs[1], "the caller gets the error itself, not the wrapper")
	require.NoError(t, errs[2])
	require.EqualValues(t, 3, runs.Load(), "no call ran twice")
	require.Equal(t, []byte("v"), get(t, db, "r0"))
	require.Equal(t, []byte("v"), get(t, db, "r2"))

	err := db.Update(ctx, func(tx Tx) error { return Reject(taken) })
	require.Equal(t, taken, err)
	require.NoError(t, Reject(nil))
}

// Group commit's bookkeeping reuses its state: a lone Batch call
// allocates at most two objects more than the Update it becomes (it
// allocated nine more when every call made its channel, slices and
// closure).
func TestBatchAllocatesLittleMoreThanUpdate(t *testing.T) {
	db := openInternal(t, &Options{NoSync: true})
	ctx := context.Background()
	fn := func(tx Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put([]byte("k"), []byte("v"))
	}
	require.NoError(t, db.Update(ctx, fn)) // the bucket exists from here on
	update := testing.AllocsPerRun(200, func() { _ = db.Update(ctx, fn) })
	batch := testing.AllocsPerRun(200, func() { _ = db.Batch(ctx, fn) })
	t.Logf("Batch %.1f allocations, Update %.1f", batch, update)
	require.LessOrEqual(t, batch, update+2, "Batch %.1f allocations, Update %.1f", batch, update)
}

// commitSizes returns Options that record the number of calls of every
// commit, and a function returning them so far.
func commitSizes(o Options) (*Options, func() []int) {
	var mu sync.Mutex
	var sizes []int
	o.Observer = &observe.Observer{Commit: func(e observe.Commit) {
		mu.Lock()
		sizes = append(sizes, e.Calls)
		mu.Unlock()
	}}
	return &o, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}

// poolRound runs one batch of n workers (the first function to run holds
// the transaction until every worker has called, so they are all in it; every function takes slow, so the batch takes at least
// n*slow), then each worker i for which again returns true calls once more,
// after pausing as long as it says.
func poolRound(t *testing.T, db *DB, n int, slow time.Duration, again func(i int) (bool, time.Duration)) {
	t.Helper()
	ctx := context.Background()
	var first atomic.Bool
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			require.NoError(t, db.Batch(ctx, func(tx Tx) error {
				if first.CompareAndSwap(false, true) {
					// In the batch already, or queued to join it (this runs
					// on the leader's goroutine, which owns db.batch.batch).
					for deadline := time.Now().Add(10 * time.Second); len(db.batch.batch)+db.batch.queued() < n; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							return errors.New("the other workers did not queue")
						}
					}
				}
				time.Sleep(slow)
				return put(fmt.Sprint("first", i))(tx)
			}))
			if ok, pause := again(i); ok {
				time.Sleep(pause)
				require.NoError(t, db.Batch(ctx, put(fmt.Sprint("again", i))))
			}
		})
	}
	wg.Wait()
}

// With GatherCallers, a worker pool's calls commit together: the batch
// after the pool's batch waits for its callers to come back, instead of
// committing the first one alone.
func TestGatherCallersWaitsForThePool(t *testing.T) {
	t.Parallel()
	opts, sizes := commitSizes(Options{NoSync: true, GatherCallers: true})
	db := openInternal(t, opts)
	db.batch.maxWait = time.Second // half the batch's time (40 ms): room for a slow machine
	// Worker 0 calls again at once, the others a millisecond later: without
	// gathering, worker 0 would commit alone.
	poolRound(t, db, 4, 20*time.Millisecond, func(i int) (bool, time.Duration) {
		if i == 0 {
			return true, 0
		}
		return true, time.Millisecond
	})
	require.Equal(t, []int{4, 4}, sizes())
	for i := range 4 {
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint("again", i)))
	}
	require.Zero(t, db.batch.backoff, "the wait was answered")
}

// Callers that do not come back cost one bounded wait, and the batches
// after it do not wait.
func TestGatherCallersBacksOffWhenCallersStayAway(t *testing.T) {
	t.Parallel()
	opts, sizes := commitSizes(Options{NoSync: true, GatherCallers: true})
	db := openInternal(t, opts)
	poolRound(t, db, 3, 10*time.Millisecond, func(i int) (bool, time.Duration) { return i == 0, 0 })
	require.Equal(t, []int{3, 1}, sizes())
	require.Equal(t, []byte("v"), get(t, db, "again0"))
	require.Equal(t, 1, db.batch.skip, "the wait timed out: the next batch does not wait")
	require.Equal(t, 1, db.batch.backoff)
	require.Zero(t, db.batch.want)

	// A batch of one is never followed by a wait, and does not use up the
	// back-off.
	require.NoError(t, db.Batch(context.Background(), put("later")))
	require.Equal(t, 1, db.batch.skip, "a batch of one is not followed by a wait")
}

// holdUntil returns a Batch function that, the first time it runs, keeps
// the transaction open until queued calls are waiting behind it (and then
// runs then, if set).
func holdUntil(t *testing.T, db *DB, queued int, then func()) func(Tx) error {
	var once sync.Once
	return func(tx Tx) error {
		var err error
		once.Do(func() {
			if err = waitQueuedBehind(db, queued); err == nil && then != nil {
				then()
			}
		})
		if err != nil {
			return err
		}
		return put("held")(tx)
	}
}

// waitQueuedBehind waits, inside a batch's function, until n calls are
// queued behind the batch.
func waitQueuedBehind(db *DB, n int) error {
	for deadline := time.Now().Add(10 * time.Second); db.batch.queued() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the calls did not queue")
		}
	}
	return nil
}

// Calls that queue while a batch's transaction runs join it: they commit
// with it, once each, instead of waiting for the next commit.
func TestBatchTakesInCallsQueuedWhileItRuns(t *testing.T) {
	t.Parallel()
	oneRun(t)
	opts, sizes := commitSizes(Options{NoSync: true})
	db := openInternal(t, opts)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, db.Batch(ctx, holdUntil(t, db, 2, nil))) })
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	var runs [2]atomic.Int32
	for i := range 2 {
		wg.Go(func() {
			require.NoError(t, db.Batch(ctx, func(tx Tx) error {
				runs[i].Add(1)
				return put(fmt.Sprint("k", i))(tx)
			}))
		})
	}
	wg.Wait()
	require.Equal(t, []int{3}, sizes(), "one commit for the three calls")
	for i := range 2 {
		require.EqualValues(t, 1, runs[i].Load())
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint("k", i)))
	}
}

// A batch takes in no more calls than MaxBatchSize; the rest form the
// next batches.
func TestBatchTakesInUpToMaxBatchSize(t *testing.T) {
	t.Parallel()
	opts, sizes := commitSizes(Options{NoSync: true, MaxBatchSize: 2})
	db := openInternal(t, opts)
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, db.Batch(ctx, holdUntil(t, db, 4, nil))) })
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	for i := range 4 {
		wg.Go(func() { require.NoError(t, db.Batch(ctx, put(fmt.Sprint("k", i)))) })
	}
	wg.Wait()
	require.Equal(t, []int{2, 2, 1}, sizes())
	for i := range 4 {
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint("k", i)))
	}
}

// A call whose context ends while it waits is answered with its error
// when a running batch would take it in, and never runs.
func TestBatchDoesNotTakeInCanceledCalls(t *testing.T) {
	t.Parallel()
	opts, sizes := commitSizes(Options{NoSync: true})
	db := openInternal(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, db.Batch(context.Background(), holdUntil(t, db, 1, cancel))) })
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	var ran atomic.Bool
	var err error
	wg.Go(func() { err = db.Batch(ctx, func(Tx) error { ran.Store(true); return nil }) })
	wg.Wait()
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran.Load())
	require.Equal(t, []int{1}, sizes())
}

// A call rejected before the batch takes in more calls keeps its
// rejection, however many calls join after it.
func TestBatchKeepsRejectionsWhenItTakesInCalls(t *testing.T) {
	t.Parallel()
	oneRun(t)
	opts, sizes := commitSizes(Options{NoSync: true})
	db := openInternal(t, opts)
	ctx := context.Background()
	taken := errors.New("taken")
	var wg sync.WaitGroup
	var err error
	wg.Go(func() {
		err = db.Batch(ctx, func(Tx) error {
			if err := waitQueuedBehind(db, 4); err != nil {
				return err
			}
			return Reject(taken) // decided without writing, as Reject requires
		})
	})
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	for i := range 4 {
		wg.Go(func() { require.NoError(t, db.Batch(ctx, put(fmt.Sprint("k", i)))) })
	}
	wg.Wait()
	require.ErrorIs(t, err, taken)
	require.Equal(t, []int{5}, sizes())
	for i := range 4 {
		require.Equal(t, []byte("v"), get(t, db, fmt.Sprint("k", i)))
	}
}

// Concurrent calls with every outcome (a write, a rejection, an error
// after a write, a panic after a write), under every batching setting:
// each caller gets its own function's outcome, and exactly the writes of
// the calls that succeeded are in the file.
func TestBatchOutcomesUnderLoad(t *testing.T) {
	t.Parallel()
	settings := map[string]Options{
		"default":       {NoSync: true},
		"small batches": {NoSync: true, MaxBatchSize: 3},
		"gather":        {NoSync: true, GatherCallers: true},
		"gather, small": {NoSync: true, GatherCallers: true, MaxBatchSize: 4},
		"delay, small":  {NoSync: true, MaxBatchDelay: 50 * time.Microsecond, MaxBatchSize: 5},
	}
	for name, o := range settings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := openInternal(t, &o)
			rejected, failed := errors.New("rejected"), errors.New("failed")
			type outcome int
			const (
				wrote outcome = iota
				rejects
				fails
				panics
			)
			of := func(g, i int) outcome {
				switch (g*7919 + i*104729) % 20 {
				case 0, 1, 2:
					return rejects
				case 3, 4:
					return fails
				case 5:
					return panics
				}
				return wrote
			}
			const goroutines, calls = 8, 150
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range calls {
						k := fmt.Sprint(g, "-", i)
						want := of(g, i)
						var err error
						var p any
						func() {
							defer func() { p = recover() }()
							err = db.Batch(context.Background(), func(tx Tx) error {
								if want == rejects {
									return Reject(rejected) // nothing written
								}
								if err := put(k)(tx); err != nil {
									return err
								}
								switch want {
								case fails:
									return failed
								case panics:
									panic(k)
								}
								return nil
							})
						}()
						switch want {
						case wrote:
							assert.NoError(t, err, k)
							assert.Nil(t, p, k)
						case rejects:
							assert.ErrorIs(t, err, rejected, k)
						case fails:
							assert.ErrorIs(t, err, failed, k)
						case panics:
							assert.Equal(t, k, p, k)
						}
					}
				})
			}
			wg.Wait()
			for g := range goroutines {
				for i := range calls {
					k := fmt.Sprint(g, "-", i)
					if of(g, i) == wrote {
						assert.Equal(t, []byte("v"), get(t, db, k), k)
					} else {
						assert.Nil(t, get(t, db, k), k)
					}
				}
			}
		})
	}
}

// A panic raised in a batch's commit outside every call's function (an
// observer's Commit, an OnCommit handler) ends the leader's call with it,
// answers the other calls of the batch, which the commit may have
// applied, and leaves group commit working: before, the leader's caller
// recovering (as net/http does) left every later Batch call queued for
// ever.
func TestBatchSurvivesAPanicInItsCommit(t *testing.T) {
	t.Parallel()
	t.Run("observer", func(t *testing.T) {
		t.Parallel()
		var panicNext atomic.Bool
		db := openInternal(t, &Options{Observer: &observe.Observer{Commit: func(observe.Commit) {
			if panicNext.CompareAndSwap(true, false) {
				panic("commit bug")
			}
		}}})
		batchWithPanickingCommit(t, db, func(Tx) { panicNext.Store(true) })
	})
	t.Run("OnCommit", func(t *testing.T) {
		t.Parallel()
		batchWithPanickingCommit(t, openInternal(t, nil), func(tx Tx) {
			tx.OnCommit(func() { panic("commit bug") })
		})
	})
}

// batchWithPanickingCommit runs a batch whose leader's function calls
// arm, to make the commit panic with "commit bug", and checks what
// each call and the next one get.
func batchWithPanickingCommit(t *testing.T, db *DB, arm func(Tx)) {
	ctx := context.Background()
	release := make(chan struct{})
	var recovered any
	var leaderDone sync.WaitGroup
	leaderDone.Go(func() {
		defer func() { recovered = recover() }()
		_ = db.Batch(ctx, func(tx Tx) error {
			<-release
			arm(tx)
			return put("leader")(tx)
		})
	})
	require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
	followers := make(chan error, 2)
	for _, k := range []string{"a", "b"} {
		go func() { followers <- db.Batch(ctx, put(k)) }()
	}
	waitQueued(t, db, 2)
	close(release)
	leaderDone.Wait()
	require.Equal(t, "commit bug", recovered, "the leader's caller meets the panic")

	// The followers, queued while the leader's function ran, joined its
	// batch: each is told the commit may have applied, as it did.
	for range 2 {
		select {
		case err := <-followers:
			require.ErrorIs(t, err, ErrCommitUnknown)
		case <-time.After(10 * time.Second):
			t.Fatal("a call of the panicked batch was never answered")
		}
	}
	for _, k := range []string{"leader", "a", "b"} {
		require.Equal(t, []byte("v"), get(t, db, k), k)
	}

	done := make(chan error, 1)
	go func() { done <- db.Batch(ctx, put("after")) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Batch hangs after a commit that panicked")
	}
	require.Equal(t, []byte("v"), get(t, db, "after"))
}

// Writer shows a write transaction holding the writer, for as long as it
// does, and the calls queued behind it; and nothing once it is over,
// however it ended (a commit, a panic in its function or in its commit).
func TestWriterShowsTheTransactionHoldingIt(t *testing.T) {
	t.Parallel()
	db := openInternal(t, &Options{NoSync: true})
	ctx := context.Background()
	require.Equal(t, WriterState{}, db.Writer())

	for _, update := range []bool{false, true} {
		release := make(chan struct{})
		held := make(chan struct{})
		done := make(chan error, 1)
		heldOnce := sync.OnceFunc(func() { close(held) }) // once, should the function run again
		hold := func(Tx) error { heldOnce(); <-release; return nil }
		go func() {
			if update {
				done <- db.Update(ctx, hold)
			} else {
				done <- db.Batch(ctx, hold)
			}
		}()
		testwait.Receive(t, held, "the writer held")
		// Positive once the clock has moved: on Windows it moves in ticks.
		require.Eventually(t, func() bool { return db.Writer().Held > 0 }, 10*time.Second, time.Millisecond, "update=%v", update)
		first := db.Writer().Held
		queued := make(chan error, 2)
		// Behind an Update, the first Batch call leads its batch, waiting
		// for the writer's turn, and the second queues for the next;
		// behind a batch, both queue. Either way, two writes wait.
		if update {
			go func() { queued <- db.Batch(ctx, put("a")) }()
			require.Eventually(t, func() bool { return db.batch.leaderRunning() }, 10*time.Second, time.Millisecond)
			go func() { queued <- db.Batch(ctx, put("b")) }()
		} else {
			for _, k := range []string{"a", "b"} {
				go func() { queued <- db.Batch(ctx, put(k)) }()
			}
		}
		require.Eventually(t, func() bool { return db.Writer().Queued == 2 }, 10*time.Second, time.Millisecond, "update=%v", update)
		st := db.Writer()
		require.GreaterOrEqual(t, st.Held, first, "it grows while held")
		require.Equal(t, 2, st.Queued)
		close(release)
		require.NoError(t, testwait.Receive(t, done, "the holder's answer"))
		require.NoError(t, testwait.Receive(t, queued, "a queued call's answer"))
		require.NoError(t, testwait.Receive(t, queued, "the other queued call's answer"))
		require.Equal(t, WriterState{}, db.Writer(), "update=%v", update)
	}

	func() {
		defer func() { require.NotNil(t, recover()) }()
		_ = db.Update(ctx, func(Tx) error { panic("in the function") })
	}()
	require.Equal(t, WriterState{}, db.Writer(), "after a panic in Update's function")
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_ = db.Batch(ctx, func(tx Tx) error { tx.OnCommit(func() { panic("in the commit") }); return nil })
	}()
	require.Equal(t, WriterState{}, db.Writer(), "after a panic in a batch's commit")
}

// An Update whose context ends while it waits for the writer (held by a
// batch that runs long) returns at once, its function never run.
func TestUpdateCanceledWhileWaitingForTheWriter(t *testing.T) {
	t.Parallel()
	db := openInternal(t, nil)
	release, held := make(chan struct{}), make(chan struct{})
	leader := make(chan error, 1)
	heldOnce := sync.OnceFunc(func() { close(held) }) // once, should the function run again
	go func() {
		leader <- db.Batch(context.Background(), func(tx Tx) error { heldOnce(); <-release; return put("leader")(tx) })
	}()
	testwait.Receive(t, held, "the writer held")
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ran := false
	go func() { done <- db.Update(c, func(tx Tx) error { ran = true; return put("never")(tx) }) }()
	require.Eventually(t, func() bool { return db.Writer().Queued == 1 }, 10*time.Second, time.Millisecond, "it waits for the writer's turn")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, "answered while the writer is still held")
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Update waited for the writer past its context")
	}
	require.Zero(t, db.Writer().Queued, "it waits no more")
	close(release)
	require.NoError(t, testwait.Receive(t, leader, "the leader's answer"))
	require.False(t, ran)
	require.Nil(t, get(t, db, "never"))
	require.NoError(t, db.Update(context.Background(), put("after")), "the turn was given back")
	require.Equal(t, []byte("v"), get(t, db, "after"))
}

// oneRun skips a test of the batcher's own runs in a build with -tags
// oncekv_rerun, where every transaction runs twice (kvtest.RequireOneRun,
// which this package's own tests cannot import).
func oneRun(t *testing.T) {
	t.Helper()
	if rerun.Enabled {
		t.Skip("kv: not in a rerun build: counts the batcher's runs of each call")
	}
}

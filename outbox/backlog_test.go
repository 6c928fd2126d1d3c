package outbox_test

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
)

// severalWriters presents a bbolt file as a store with several writers
// (etcd's traits: sequences under a prefix per process, the queue ordered by commit revision,
// read whole to find its head), and counts the entries its cursors visit.
type severalWriters struct {
	kv.Backend
	visited atomic.Int64
	// rev, if set, gives the cursors a commit revision for each key, as
	// etcd's cursors have (outbox orders several writers' events by it).
	rev func(key []byte) int64
}

func (b *severalWriters) Traits() kv.Traits {
	t := b.Backend.Traits()
	t.SingleWriter, t.GroupCommit = false, false
	return t
}

func (b *severalWriters) View(ctx context.Context, fn func(kv.Tx) error) error {
	return b.Backend.View(ctx, func(tx kv.Tx) error { return fn(countingTx{unwrap(tx), b}) })
}

func (b *severalWriters) Update(ctx context.Context, fn func(kv.Tx) error) error {
	return b.Backend.Update(ctx, func(tx kv.Tx) error { return fn(countingTx{unwrap(tx), b}) })
}

// unwrap is the backend's transaction under the DB's guard (the DB over
// this backend guards oncekv's buckets itself).
func unwrap(tx kv.Tx) kv.Tx {
	if u, ok := tx.(interface{ Unwrap() kv.Tx }); ok {
		return u.Unwrap()
	}
	return tx
}

type countingTx struct {
	kv.Tx
	b *severalWriters
}

func (t countingTx) Bucket(name []byte) kv.Bucket {
	bk := t.Tx.Bucket(name)
	if bk == nil {
		return nil
	}
	return countingBucket{bk, t.b}
}

func (t countingTx) CreateBucketIfNotExists(name []byte) (kv.Bucket, error) {
	bk, err := t.Tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return countingBucket{bk, t.b}, nil
}

type countingBucket struct {
	kv.Bucket
	b *severalWriters
}

func (b countingBucket) Cursor() kv.Cursor {
	c := countingCursor{b.Bucket.Cursor(), b.b}
	if b.b.rev != nil {
		return &revisionCursor{countingCursor: c}
	}
	return c
}

// revisionCursor is a countingCursor with the revision severalWriters.rev
// gives the key it is on.
type revisionCursor struct {
	countingCursor
	at []byte
}

func (c *revisionCursor) on(k, v []byte) ([]byte, []byte) { c.at = k; return k, v }
func (c *revisionCursor) First() ([]byte, []byte)         { return c.on(c.countingCursor.First()) }
func (c *revisionCursor) Next() ([]byte, []byte)          { return c.on(c.countingCursor.Next()) }
func (c *revisionCursor) Seek(s []byte) ([]byte, []byte)  { return c.on(c.countingCursor.Seek(s)) }
func (c *revisionCursor) Last() ([]byte, []byte)          { return c.on(c.Cursor.Last()) }
func (c *revisionCursor) Prev() ([]byte, []byte)          { return c.on(c.Cursor.Prev()) }
func (c *revisionCursor) Revision() int64                 { return c.b.rev(c.at) }

type countingCursor struct {
	kv.Cursor
	b *severalWriters
}

func (c countingCursor) count(k, v []byte) ([]byte, []byte) {
	if k != nil {
		c.b.visited.Add(1)
	}
	return k, v
}

func (c countingCursor) First() ([]byte, []byte)        { return c.count(c.Cursor.First()) }
func (c countingCursor) Next() ([]byte, []byte)         { return c.count(c.Cursor.Next()) }
func (c countingCursor) Seek(s []byte) ([]byte, []byte) { return c.count(c.Cursor.Seek(s)) }

func openSeveralWriters(t *testing.T, opts *kv.Options) (*outbox.Outbox, *kv.DB, *severalWriters) {
	t.Helper()
	kvtest.RequireLocal(t, "presents a bbolt file as a store of several writers")
	b := &severalWriters{Backend: kvtest.Open(t, &kv.Options{NoSync: true}, outbox.RecordKind)}
	db, err := kv.New(b, opts)
	require.NoError(t, err)
	return outbox.New(db), db, b
}

func addEvents(t *testing.T, o *outbox.Outbox, n int) {
	t.Helper()
	for i := range n {
		_, _, err := o.Add(ctx, ev(fmt.Sprintf("ev-%04d", i)))
		require.NoError(t, err)
	}
}

// drain publishes the n pending events of o in one pass, batch events at a
// time, counting from zero the entries b's cursors visit.
func drain(t *testing.T, o *outbox.Outbox, b *severalWriters, batch, n int) *batches {
	t.Helper()
	pub := &batches{ack: -1}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, BatchSize: batch})
	require.NoError(t, err)
	b.visited.Store(0)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Published)
	return pub
}

// With several writers the queue's order is known only from a read of
// the whole queue: a pass reads it once and publishes batch after batch
// from that reading. Reading it again for every batch made draining a
// backlog quadratic: here 100 batches, each reading what was left, about
// 50,000 entries for 1,000 events.
func TestDrainingABacklogReadsTheQueueOnce(t *testing.T) {
	o, db, b := openSeveralWriters(t, nil)
	const n = 1000
	addEvents(t, o, n)
	pub := drain(t, o, b, 10, n)
	require.Len(t, pub.sizes, n/10)
	seen := map[string]int{}
	for _, e := range pub.seen {
		seen[e.ID]++
	}
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, id)
	}
	require.Empty(t, pending(t, db))
	require.LessOrEqual(t, b.visited.Load(), int64(2*n), "the queue read once, not once a batch")
}

// A reading of the whole queue keeps its head, at most maxReading events
// in commit order, whatever the backlog: it held every pending event,
// decoded, and a broker's long outage on etcd left a backlog as large as
// etcd's space quota for the relay to hold in memory. Past the head the
// pass reads the queue again; events of one commit (one revision) keep
// the order they were added in, across readings too.
func TestAReadingKeepsTheHeadOfTheQueue(t *testing.T) {
	defer outbox.SetMaxReading(9)() // a reading of 25 is cut back once, at 18
	o, db, b := openSeveralWriters(t, nil)
	const n = 25
	// Commit revisions out of key order, three events to some revisions.
	rev := func(k []byte) int64 {
		seq := binary.BigEndian.Uint64(k)
		return int64((seq&0xffffffff)*7%9) + 1
	}
	addEvents(t, o, n)
	var want []string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		want = nil
		type keyed struct {
			rev int64
			seq uint64
			id  string
		}
		var all []keyed
		for e, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			all = append(all, keyed{rev(binary.BigEndian.AppendUint64(nil, e.Seq)), e.Seq, e.ID})
		}
		slices.SortFunc(all, func(a, b keyed) int {
			if c := cmp.Compare(a.rev, b.rev); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
		for _, e := range all {
			want = append(want, e.id)
		}
		return nil
	}))
	require.Len(t, want, n)
	b.rev = rev
	pub := drain(t, o, b, 4, n)
	var got []string
	for _, e := range pub.seen {
		got = append(got, e.ID)
	}
	require.Equal(t, want, got, "commit order across three readings")
	read := int64(n + (n - 9) + (n - 18))
	if kvtest.RunsTwice() {
		read *= 2
	}
	require.Equal(t, read, b.visited.Load(), "readings of 25, 16 and 7 events, each keeping at most 9")
	require.Empty(t, pending(t, db))
}

// With several writers, passes while the head of the queue waits out its
// backoff read nothing: an event committed meanwhile comes after the head
// in commit order. Run is woken by every commit, and each pass read the
// whole queue; with the publisher down that held a core. The head is
// tried again when its backoff ends, and the events behind it follow.
func TestPassesDuringTheHeadsBackoffReadNothing(t *testing.T) {
	kvtest.RequireOneRun(t, "counts the entries its reads read")
	clock := kvtest.NewManualClock(t0)
	o, db, b := openSeveralWriters(t, &kv.Options{Clock: clock})
	addEvents(t, o, 200)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	published := map[string]int{}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if down.Load() {
				return errors.New("broker down")
			}
			mu.Lock()
			published[e.ID]++
			mu.Unlock()
			return nil
		}),
		Backoff: outbox.Backoff{Base: time.Minute, Cap: time.Minute},
	})
	require.NoError(t, err)
	b.visited.Store(0)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Failed)
	require.Positive(t, st.Wait)
	require.EqualValues(t, 200, b.visited.Load(), "the failing pass read the queue once: its wait is the failed event's backoff")

	b.visited.Store(0)
	for i := range 50 { // a commit, then the pass it wakes
		_, _, err := o.Add(ctx, ev(fmt.Sprintf("late-%02d", i)))
		require.NoError(t, err)
		st, err := relay.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, st.Published+st.Failed)
		require.Positive(t, st.Wait)
	}
	require.Zero(t, b.visited.Load(), "no pass before the head's backoff ends reads the queue")

	down.Store(false)
	clock.Advance(2 * time.Minute)
	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 250, st.Published)
	require.Len(t, published, 250)
	require.Empty(t, pending(t, db))
}

// The backlog is measured for the observer after a pass that published,
// failed or quarantined an event, and otherwise at most once a
// PollInterval: measuring reads the whole queue, and an idle relay's
// passes come at every commit.
func TestLagIsMeasuredAfterWorkOrOnceAPollInterval(t *testing.T) {
	clock := kvtest.NewManualClock(t0)
	var lags atomic.Int64
	obs := &observe.Observer{OutboxLag: func(observe.OutboxLag) { lags.Add(1) }}
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: obs}, outbox.RecordKind)
	o := outbox.New(db)
	addEvents(t, o, 3)
	var fail atomic.Bool
	fail.Store(true)
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error {
			if fail.Load() {
				return errors.New("broker down")
			}
			return nil
		}),
		PollInterval: 10 * time.Second,
		Backoff:      outbox.Backoff{Base: time.Minute, Cap: time.Minute},
	})
	require.NoError(t, err)
	_, err = relay.RunOnce(ctx) // fails the head: measured
	require.NoError(t, err)
	require.EqualValues(t, 1, lags.Load())
	for range 20 {
		_, err = relay.RunOnce(ctx)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, lags.Load(), "passes with nothing done, within a PollInterval")
	clock.Advance(10 * time.Second)
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, lags.Load(), "a PollInterval later")
	fail.Store(false)
	clock.Advance(time.Minute)
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 3, lags.Load(), "a pass that published")

	// Whatever the mix: one published and one failed, then one failed
	// and quarantined, each well within a PollInterval.
	relay, err = outbox.NewRelay(o, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if strings.HasPrefix(e.ID, "poison") {
				return errors.New("broker refuses it")
			}
			return nil
		}),
		PollInterval: time.Hour, MaxAttempts: 2,
		Backoff: outbox.Backoff{Base: time.Minute, Cap: time.Minute},
	})
	require.NoError(t, err)
	_, err = relay.RunOnce(ctx) // its first pass: measured
	require.NoError(t, err)
	require.EqualValues(t, 4, lags.Load())
	_, _, err = o.Add(ctx, ev("ok-1"))
	require.NoError(t, err)
	_, _, err = o.Add(ctx, ev("poison-1"))
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.PassStats{Published: 1, Failed: 1, Wait: st.Wait}, st)
	require.EqualValues(t, 5, lags.Load(), "a pass that published one and failed one")
	clock.Advance(2 * time.Minute)
	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.PassStats{Failed: 1, Quarantined: 1}, st)
	require.EqualValues(t, 6, lags.Load(), "a pass that failed one for good")
}

// With several writers, a pass that quarantines an event takes the next
// batch from its reading after that event: the quarantined one is not
// published, the others are, once each.
func TestQuarantineWithinAReading(t *testing.T) {
	o, db, _ := openSeveralWriters(t, nil)
	addEvents(t, o, 30)
	var mu sync.Mutex
	published := map[string]int{}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if e.ID == "ev-0007" || e.ID == "ev-0021" {
				return errors.New("poison")
			}
			mu.Lock()
			published[e.ID]++
			mu.Unlock()
			return nil
		}),
		BatchSize: 4, MaxAttempts: 1,
	})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 28, st.Published)
	require.Equal(t, 2, st.Quarantined)
	require.Len(t, published, 28)
	for id, n := range published {
		require.Equal(t, 1, n, id)
	}
	require.NotContains(t, published, "ev-0007")
	require.NotContains(t, published, "ev-0021")
	require.Empty(t, pending(t, db))
	l, err := o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, l.Quarantined)
}

// RequeueAll, after an outage quarantined what kept failing: every
// quarantined event pending again with a fresh attempt budget, in
// transactions the store takes (on etcd, 250 events take nine), each
// then published once; a second RequeueAll finds nothing.
func TestRequeueAllAfterAnOutage(t *testing.T) {
	o, db, _ := setupOutbox(t)
	const n = 250
	addEvents(t, o, n)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	var published []string
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{
		Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
			if down.Load() {
				return errors.New("broker down")
			}
			mu.Lock()
			published = append(published, e.ID)
			mu.Unlock()
			return nil
		}),
		MaxAttempts: 1,
	})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Quarantined)
	l, err := o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.Lag{Quarantined: n}, l)

	moved, err := o.RequeueAll(ctx)
	require.NoError(t, err)
	require.Equal(t, n, moved)
	l, err = o.Lag(ctx)
	require.NoError(t, err)
	require.Equal(t, n, l.Pending)
	require.Zero(t, l.Quarantined)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for e, err := range outbox.Events(tx, outbox.EventPending) {
			require.NoError(t, err)
			require.Zero(t, e.Attempts, "a fresh attempt budget")
			require.True(t, e.NextAttempt.IsZero(), "due now")
		}
		return nil
	}))

	down.Store(false)
	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Published)
	require.Len(t, published, n)
	if db.Traits().SingleWriter {
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("ev-%04d", i))
		}
		require.Equal(t, want, published, "at their places in sequence order")
	}
	moved, err = o.RequeueAll(ctx)
	require.NoError(t, err)
	require.Zero(t, moved)
}

// On a backend that runs a read again after a failed attempt (etcd), a
// pass publishes each event once: the batch, and the whole queue read
// with several writers, gathered into what the first run had left, and
// the events it held went out twice.
func TestARetriedReadPublishesEachOnce(t *testing.T) {
	for _, several := range []bool{false, true} {
		t.Run(fmt.Sprintf("several=%v", several), func(t *testing.T) {
			kvtest.RequireLocal(t, "wraps a bbolt file")
			var b kv.Backend = kvtest.Open(t, &kv.Options{NoSync: true}, outbox.RecordKind)
			if several {
				b = &severalWriters{Backend: b}
			}
			db, err := kv.New(kvtest.RetriedViews(b), nil)
			require.NoError(t, err)
			o := outbox.New(db)
			addEvents(t, o, 30)
			pub := &batches{ack: -1}
			relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, BatchSize: 7})
			require.NoError(t, err)
			st, err := relay.RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, 30, st.Published)
			seen := map[string]int{}
			for _, e := range pub.seen {
				seen[e.ID]++
			}
			require.Len(t, seen, 30)
			require.Len(t, pub.seen, 30, "each once")
		})
	}
}

// A failed attempt is counted once when the transaction that records it
// runs again (a conflict on etcd): it counted again from the first run's
// count, and an event met quarantine in half its attempts.
func TestAFailedAttemptIsCountedOnceWhenItsWriteRunsAgain(t *testing.T) {
	kvtest.RequireLocal(t, "wraps a bbolt file")
	clock := kvtest.NewManualClock(t0)
	file := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, outbox.RecordKind)
	db, err := kv.New(kvtest.RetriedTxs(file), &kv.Options{Clock: clock})
	require.NoError(t, err)
	o := outbox.New(db)
	addEvents(t, o, 1)
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{MaxAttempts: 3, Backoff: outbox.Backoff{Base: time.Minute, Cap: time.Minute},
		Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error { return errors.New("broker down") })})
	require.NoError(t, err)
	for attempt := 1; attempt <= 2; attempt++ {
		st, err := relay.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, outbox.PassStats{Failed: 1, Wait: st.Wait}, st, "attempt %d", attempt)
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			for e, err := range outbox.Events(tx, outbox.EventPending) {
				require.NoError(t, err)
				require.Equal(t, attempt, e.Attempts)
			}
			return nil
		}))
		clock.Advance(2 * time.Minute)
	}
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Quarantined, "at the third attempt, not before")
}

package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/looptest"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
)

// These tests pin down edges that mutants (make mutate) showed no test
// looked at.

// batches records the size of every Publish call and acks the first ack
// events of each (all when ack < 0), failing the rest.
type batches struct {
	mu    sync.Mutex
	sizes []int
	seen  []outbox.Event
	ack   int
}

func (b *batches) Publish(_ context.Context, events []outbox.Event) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(events))
	n := len(events)
	if b.ack >= 0 && b.ack < n {
		n = b.ack
	}
	b.seen = append(b.seen, events[:n]...)
	if n < len(events) {
		return n, errors.New("broker took only part of the batch")
	}
	return n, nil
}

// BatchSize bounds every Publish call; headers (or none) travel with the
// event; the first publish counts as attempt 1.
func TestBatchSizeHeadersAndAttempts(t *testing.T) {
	o, db, _ := setupOutbox(t)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		e := ev(id)
		if id == "e" {
			e.Headers = nil
		} else {
			e.Headers = map[string]string{"source": "test", "id": id}
		}
		_, _, err := o.Add(ctx, e)
		require.NoError(t, err)
	}
	pub := &batches{ack: -1}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, BatchSize: 2})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.Published)
	require.Equal(t, []int{2, 2, 1}, pub.sizes)
	for _, e := range pub.seen[:4] {
		require.Equal(t, map[string]string{"source": "test", "id": e.ID}, e.Headers)
	}
	require.Nil(t, pub.seen[4].Headers)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for e, err := range outbox.Events(tx, outbox.EventPublished) {
			require.NoError(t, err)
			require.Equal(t, 1, e.Attempts, "published at the first attempt")
		}
		return nil
	}))
}

// A partial acknowledgement: the acked events are published, the first
// unacked one fails and waits its backoff (the pass reports the wait, and
// a pass during the backoff publishes nothing); with MaxAttempts 1 it is
// quarantined and the pass says so; the observer hears of every publish
// and of the backlog.
func TestPartialAckBackoffQuarantineAndObserver(t *testing.T) {
	clock := kvtest.NewManualClock(t0)
	var mu sync.Mutex
	var pubs []observe.Publish
	var lags []observe.OutboxLag
	obs := &observe.Observer{
		Publish:   func(_ context.Context, e observe.Publish) { mu.Lock(); pubs = append(pubs, e); mu.Unlock() },
		OutboxLag: func(e observe.OutboxLag) { mu.Lock(); lags = append(lags, e); mu.Unlock() },
	}
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: obs}, outbox.RecordKind)
	o := outbox.New(db)
	for _, id := range []string{"a", "b", "c"} {
		_, _, err := o.Add(ctx, ev(id))
		require.NoError(t, err)
	}
	pub := &batches{ack: 1}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, MaxAttempts: 2, Backoff: outbox.Backoff{Base: time.Minute, Cap: time.Minute}})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Published)
	require.Equal(t, 1, st.Failed)
	require.Zero(t, st.Quarantined)
	require.Positive(t, st.Wait, "the head waits its backoff")
	require.ElementsMatch(t, []string{"b", "c"}, pending(t, db), "listed in sequence order: commit order on bbolt, random numbers on etcd")

	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Published+st.Failed, "nothing is due during the backoff")
	require.Positive(t, st.Wait)

	clock.Advance(2 * time.Minute)
	pub.ack = 0
	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Quarantined, "the second failure of b puts it aside")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, lags)
	require.GreaterOrEqual(t, len(pubs), 3)
	require.False(t, pubs[0].Err)
	var quarantined int
	for _, p := range pubs {
		if p.Quarantined {
			quarantined++
		}
	}
	require.Equal(t, 1, quarantined)
}

// The webhook publisher: any 2xx is a publish, 299 included; any 3xx is a
// failure, 300 and 399 included; so is a 1xx-less 4xx.
func TestWebhookStatusEdges(t *testing.T) {
	for code, ok := range map[int]bool{200: true, 299: true, 300: false, 399: false, 400: false} {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		o, db, _ := setupOutbox(t)
		_, _, err := o.Add(ctx, ev("e"))
		require.NoError(t, err)
		relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: &outbox.WebhookPublisher{URL: sink.URL}})
		require.NoError(t, err)
		st, err := relay.RunOnce(ctx)
		require.NoError(t, err)
		if ok {
			require.Equal(t, 1, st.Published, "%d", code)
			require.Empty(t, pending(t, db))
		} else {
			require.Equal(t, 1, st.Failed, "%d", code)
			require.Equal(t, []string{"e"}, pending(t, db))
			require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
				for e, err := range outbox.Events(tx, outbox.EventPending) {
					require.NoError(t, err)
					require.Equal(t, code/100 == 3, strings.Contains(e.LastError, "a redirect"), "%d: %s", code, e.LastError)
				}
				return nil
			}))
		}
		sink.Close()
	}
}

// Run ends, with kv.ErrClosed, as soon as the database closes (kv.DB.Done),
// though it polls once an hour, rather than sleeping beside a closed
// database until its next poll; onPass has the error too.
func TestRelayRunEndsWhenTheDatabaseCloses(t *testing.T) {
	t.Parallel()
	for _, r := range looptest.Refusals {
		t.Run(r.Name, func(t *testing.T) {
			o, db, _ := setupOutbox(t)
			relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: &batches{ack: -1}, PollInterval: time.Hour})
			require.NoError(t, err)
			looptest.EndsWhen(t, r, db, func(ctx context.Context, onPass func(error)) error {
				return relay.Run(ctx, func(_ outbox.PassStats, err error) { onPass(err) })
			})
		})
	}
}

// Run ends, with an error matching kv.ErrSyncFailed, at the pass whose
// commit (the events marked published) had its sync fail after the meta
// page was written: the database refuses every call from then on, and a
// relay that went on would only fail every poll.
func TestRelayRunEndsWhenASyncFails(t *testing.T) {
	looptest.EndsWhenSyncFails(t, func(path string) {
		db := kvtest.OpenPath(t, path, nil, outbox.RecordKind)
		kvtest.RequireBolt(t, db)
		_, _, err := outbox.New(db).Add(ctx, ev("ev-1"))
		require.NoError(t, err)
		require.NoError(t, db.Close())
	}, func(ctx context.Context, db *kv.DB, onPass func(error)) error {
		relay, err := outbox.NewRelay(outbox.New(db), &outbox.RelayConfig{Publisher: &batches{ack: -1}, PollInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		return relay.Run(ctx, func(_ outbox.PassStats, err error) { onPass(err) })
	})
}

// The relay's default batch, a backlog several batches long, published
// once each and in order. On a store that bounds the writes of a
// transaction (etcd: 128), marking a batch of 100 published takes 300
// writes: the relay marks it in transactions that fit, where it once
// failed every pass after publishing the batch, and so published the
// same 100 events again at every pass, for ever.
func TestDefaultBatchDrainsABacklog(t *testing.T) {
	o, db, _ := setupOutbox(t)
	const n = 250
	var want []string
	for i := range n {
		id := fmt.Sprintf("ev-%03d", i)
		_, _, err := o.Add(ctx, ev(id))
		require.NoError(t, err)
		want = append(want, id)
	}
	pub := &batches{ack: -1}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Published)
	require.Equal(t, []int{100, 100, 50}, pub.sizes)
	var got []string
	for _, e := range pub.seen {
		got = append(got, e.ID)
	}
	require.Equal(t, want, got, "each event once, in commit order")
	require.Empty(t, pending(t, db))
	published := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		published = 0 // a read run again (etcd) starts afresh
		for _, err := range outbox.Events(tx, outbox.EventPublished) {
			require.NoError(t, err)
			published++
		}
		return nil
	}))
	require.Equal(t, n, published)
	st, err = relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Published, "nothing published twice")
}

// Events added in one transaction are published in the order they were
// added: on etcd they share the revision of their commit, and were
// published in the order of their random sequence numbers, so an
// "order.paid" could reach consumers before the "order.created" added
// before it in the same transaction.
func TestEventsOfOneTransactionKeepTheirOrder(t *testing.T) {
	o, db, _ := setupOutbox(t)
	const txs, per = 20, 3
	var want []string
	for i := range txs {
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			for j := range per {
				if _, _, err := o.AddTx(tx, ev(fmt.Sprintf("tx%02d-ev%d", i, j))); err != nil {
					return err
				}
			}
			return nil
		}))
		for j := range per {
			want = append(want, fmt.Sprintf("tx%02d-ev%d", i, j))
		}
	}
	pub := &batches{ack: -1}
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: pub, BatchSize: 7})
	require.NoError(t, err)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, txs*per, st.Published)
	var got []string
	for _, e := range pub.seen {
		got = append(got, e.ID)
	}
	require.Equal(t, want, got)
}

// A batch is marked published in one transaction where the store allows
// it (bbolt), and in as few as its bound allows elsewhere (etcd: a
// quarter of its 128 writes an event's three).
func TestABatchIsMarkedInAsFewTransactionsAsTheStoreTakes(t *testing.T) {
	var commits atomic.Int64
	obs := &observe.Observer{Commit: func(observe.Commit) { commits.Add(1) }}
	db := kvtest.Open(t, &kv.Options{NoSync: true, Observer: obs}, outbox.RecordKind)
	o := outbox.New(db)
	const n = 50
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for i := range n {
			if _, _, err := o.AddTx(tx, ev(fmt.Sprint("e", i))); err != nil {
				return err
			}
		}
		return nil
	}))
	relay, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: &batches{ack: -1}, BatchSize: n})
	require.NoError(t, err)
	commits.Store(0)
	st, err := relay.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, n, st.Published)
	want := 1
	if m := db.Traits().MaxTxOps; m > 0 {
		want = (n + m/4 - 1) / (m / 4)
	}
	require.EqualValues(t, want, commits.Load())
}

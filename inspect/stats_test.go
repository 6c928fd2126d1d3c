package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/recstore"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// ackFirst acknowledges the first event of every batch and fails the next.
type ackFirst struct{}

func (ackFirst) Publish(_ context.Context, events []outbox.Event) (int, error) {
	if len(events) > 1 {
		return 1, errors.New("broker down")
	}
	return len(events), nil
}

// Stats counts every kind by state (an expired record apart from live
// ones), each tenant's usage, the buckets and the file, and Outbox the
// events by state with the oldest pending first, on the file and through
// the admin API's client alike: what `oncekv stats` and the console's
// overview show.
func TestStatsCountsEveryKindByState(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC))
	db, l := openLedger(t, clock)
	do := func(key string) {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: key, Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201, Body: []byte("{}")}, nil })
		require.NoError(t, err)
	}
	do("old")
	clock.Advance(25 * time.Hour) // past the default 24h retention, not swept
	do("k1")
	do("k2")
	_, err := l.Claim(ctx, ledger.Request{Scope: "globex|POST /x", Key: "k3", Fingerprint: ledger.Fingerprint{1}})
	require.NoError(t, err)

	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: providertest.New(providertest.Rates{}, 1)}}})
	require.NoError(t, err)
	_, _, err = x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	done, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/2", Key: "2", Purpose: "charge"})
	require.NoError(t, err)
	_, err = x.Execute(ctx, done.ID)
	require.NoError(t, err)

	ob := outbox.New(db)
	for i := range 3 {
		_, _, err := ob.Add(ctx, outbox.Event{ID: fmt.Sprint("ev-", i), Topic: "orders", Payload: []byte("{}")})
		require.NoError(t, err)
	}
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: ackFirst{}})
	require.NoError(t, err)
	_, _ = relay.RunOnce(ctx) // the first published, the second failed once: two pending

	in, err := inbox.New(db, nil)
	require.NoError(t, err)
	for _, id := range []string{"m1", "m2"} {
		_, err := in.Handle(ctx, "billing", id, func(kv.Tx) error { return nil })
		require.NoError(t, err)
	}

	for name, src := range sources(t, db) {
		t.Run(name, func(t *testing.T) {
			st, err := src.Stats(ctx)
			require.NoError(t, err)
			require.Equal(t, map[string]int{
				"idempotency.expired": 1, "idempotency.completed": 2, "idempotency.in_progress": 1,
				"intent.pending": 1, "intent.succeeded": 1,
				"outbox.pending": 2, "outbox.published": 1,
				"inbox.ids": 2,
			}, st.Counts)
			usage := map[string]int64{}
			for _, u := range st.Tenants {
				usage[u.Tenant] = u.Records
			}
			require.Equal(t, map[string]int64{"acme": 3, "globex": 1}, usage, "expired records count until swept")
			require.Equal(t, "bbolt", st.Backend)
			require.Equal(t, db.PageSize(), st.PageSize)
			require.Positive(t, st.FileBytes)
			require.EqualValues(t, recstore.TailFormat, st.FormatVersion)
			buckets := map[string]int{}
			for _, b := range st.Buckets {
				buckets[b.Name] = b.Keys
				require.Positive(t, b.Depth, b.Name)
			}
			require.Contains(t, buckets, "outbox")
			require.Equal(t, 3, buckets["outbox"]+buckets["outbox.published"], "%v", buckets)

			o, err := src.Outbox(ctx)
			require.NoError(t, err)
			require.Equal(t, 2, o.Pending)
			require.Equal(t, 1, o.Published)
			require.Zero(t, o.Quarantined)
			require.Len(t, o.OldestPending, 2)
			require.Equal(t, "ev-1", o.OldestPending[0].ID, "oldest first")
		})
	}
}

// Stats, and the console's overview, show the database's writer: idle, or
// held by a write transaction, with the writes queued behind it; what an
// operator looks at when a service's writes stop.
func TestStatsShowTheWriter(t *testing.T) {
	t.Parallel()
	db, _ := openLedger(t, nil)
	srcs := sources(t, db)
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
	defer srv.Close()
	overview := func() string {
		code, body := page(t, &http.Client{}, srv.URL+inspect.ConsolePath)
		require.Equal(t, http.StatusOK, code)
		return body
	}
	for name, src := range srcs {
		st, err := src.Stats(ctx)
		require.NoError(t, err, name)
		require.Zero(t, st.WriterHeldSeconds, name)
		require.Zero(t, st.WriterQueued, name)
	}
	require.Contains(t, overview(), `id="writer">idle<`)

	held, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	heldOnce := sync.OnceFunc(func() { close(held) }) // once, should the function run again
	wg.Go(func() { _ = db.Batch(ctx, func(kv.Tx) error { heldOnce(); <-release; return nil }) })
	testwait.Receive(t, held, "the writer held")
	for range 2 {
		wg.Go(func() { _ = db.Batch(ctx, func(kv.Tx) error { return nil }) })
	}
	require.Eventually(t, func() bool { return db.Writer().Queued == 2 }, 10*time.Second, time.Millisecond)
	for name, src := range srcs {
		st, err := src.Stats(ctx)
		require.NoError(t, err, name)
		require.Positive(t, st.WriterHeldSeconds, name)
		require.Equal(t, 2, st.WriterQueued, name)
	}
	body := overview()
	require.Contains(t, body, `id="writer">held `)
	require.Contains(t, body, `id="writer-queued">2<`)
	close(release)
	wg.Wait()
}

// Stats, and the console's overview, show what the backend counts of its
// own in the service's process (etcd's conflicts and lost answers): the
// figures an operator of replicas watches. A bbolt file has none, and the
// overview shows no such table.
func TestStatsShowTheBackendsCounts(t *testing.T) {
	t.Parallel()
	plain := kvtest.Open(t, &kv.Options{NoSync: true})
	backend := kvtest.Counting(plain)
	db, err := kv.New(backend, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	l := must(ledger.New(db, nil))
	for _, k := range []string{"a", "b"} {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /x", Key: k, Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.NoError(t, err)
	}
	n := backend.Updates()
	require.GreaterOrEqual(t, n, uint64(2))
	for name, src := range sources(t, db) {
		st, err := src.Stats(ctx)
		require.NoError(t, err, name)
		require.Equal(t, []inspect.BackendCount{{Name: "updates", Value: n, Unit: "{transaction}", Description: "Write transactions run."}}, st.BackendCounts, name)
	}
	srv := httptest.NewServer(must(inspect.Handler(db, inspect.HandlerOptions{Token: token})))
	defer srv.Close()
	code, body := page(t, &http.Client{}, srv.URL+inspect.ConsolePath)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`data-backend-count="updates">%d<`, n))

	st, err := must(inspect.New(plain)).Stats(ctx)
	require.NoError(t, err)
	require.Empty(t, st.BackendCounts, "bbolt counts nothing of its own")
	plainSrv := httptest.NewServer(must(inspect.Handler(plain, inspect.HandlerOptions{Token: token})))
	defer plainSrv.Close()
	_, body = page(t, &http.Client{}, plainSrv.URL+inspect.ConsolePath)
	require.NotContains(t, body, `id="backend-counts"`)
}

package retention_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/looptest"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// allKinds are the record kinds these tests write, swept and checked.
var (
	allKinds  = []kv.RecordKind{ledger.RecordKind, inbox.RecordKind, outbox.RecordKind, sideeffect.RecordKind}
	allChecks = []kv.Checker{ledger.RecordKind, inbox.RecordKind, outbox.RecordKind, sideeffect.RecordKind}
)

var ctx = context.Background()

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func TestPolicyForAndValidate(t *testing.T) {
	t.Parallel()
	p := retention.Policy{
		Idempotency: 48 * time.Hour,
		Overrides: []retention.Override{
			{Kind: retention.Idempotency, ScopePrefix: "acme|", Retention: 72 * time.Hour},
			{Kind: retention.Idempotency, ScopePrefix: "acme|POST /v1/refunds", Retention: retention.Forever},
			{Kind: retention.Inbox, ScopePrefix: "audit", Retention: 90 * 24 * time.Hour},
		},
	}
	require.Equal(t, 48*time.Hour, p.For(retention.Idempotency, "globex|POST /v1/orders"))
	require.Equal(t, 72*time.Hour, p.For(retention.Idempotency, "acme|POST /v1/orders"))
	require.Equal(t, retention.Forever, p.For(retention.Idempotency, "acme|POST /v1/refunds"), "the longest prefix wins")
	require.Equal(t, retention.DefaultInbox, p.For(retention.Inbox, "billing"))
	require.Equal(t, 90*24*time.Hour, p.Func(retention.Inbox)("audit-log"))
	require.Equal(t, retention.DefaultPublishedEvents, p.For(retention.PublishedEvents, "order.paid"))
	require.Equal(t, retention.DefaultFinishedIntents, p.For(retention.FinishedIntents, "charge"))
	require.NoError(t, p.Validate(retention.Constraints{Lease: time.Minute, ClientRetryHorizon: 24 * time.Hour, RedeliveryHorizon: 3 * 24 * time.Hour}))

	bad := retention.Policy{
		Idempotency: 10 * time.Second,
		Inbox:       time.Hour,
		Overrides:   []retention.Override{{Kind: retention.Idempotency, ScopePrefix: "x|", Retention: 5 * time.Minute}, {Kind: "nope", Retention: time.Hour}},
	}
	err := bad.Validate(retention.Constraints{Lease: 30 * time.Second, ClientRetryHorizon: time.Hour, RedeliveryHorizon: 24 * time.Hour})
	require.ErrorIs(t, err, retention.ErrInvalidPolicy)
	require.ErrorContains(t, err, "idempotency retention 10s is shorter than the lease 30s: a record could vanish while its claim is live")
	require.ErrorContains(t, err, `idempotency (scope prefix "x|") retention 5m0s is shorter than the client retry horizon 1h0m0s`)
	require.ErrorContains(t, err, "inbox retention 1h0m0s is shorter than the broker's redelivery horizon 24h0m0s")
	require.ErrorContains(t, err, `unknown kind "nope"`)

	// Retentions past the time encoding would wrap round (issue 13, item 2).
	// A negative retention other than Forever is a mistake, said so.
	huge := retention.Policy{PublishedEvents: math.MaxInt64, Overrides: []retention.Override{
		{Kind: retention.Idempotency, ScopePrefix: "y|", Retention: 250 * 365 * 24 * time.Hour},
		{Kind: retention.Inbox, ScopePrefix: "z", Retention: -time.Hour}}}
	err = huge.Validate(retention.Constraints{})
	require.ErrorIs(t, err, retention.ErrInvalidPolicy)
	require.ErrorContains(t, err, "outbox.published retention 2562047h47m16.854775807s exceeds 100 years")
	require.ErrorContains(t, err, `idempotency (scope prefix "y|") retention 2190000h0m0s exceeds 100 years`)
	require.ErrorContains(t, err, `inbox (scope prefix "z") retention -1h0m0s is negative (use retention.Forever to keep records)`)
	require.NoError(t, retention.Policy{Inbox: keyspace.MaxRetention, FinishedIntents: retention.Forever}.Validate(retention.Constraints{}))
}

// world holds one record of every kind, written at t0 through the real
// writers with default retentions.
type world struct {
	db      *kv.DB
	clock   *kvtest.ManualClock
	l       *ledger.Ledger
	inbox   *inbox.Inbox
	outbox  *outbox.Outbox
	relay   *outbox.Relay
	x       *sideeffect.Executor
	fake    *providertest.Fake
	claim   *ledger.Claim
	parked  string
	pending string
	done    string
}

func build(t *testing.T) *world {
	t.Helper()
	w := &world{clock: kvtest.NewManualClock(t0)}
	w.db = kvtest.Open(t, &kv.Options{NoSync: true, Clock: w.clock}, allChecks...)
	var err error
	w.l, err = ledger.New(w.db, &ledger.Config{Lease: time.Minute})
	require.NoError(t, err)
	w.inbox, err = inbox.New(w.db, nil)
	require.NoError(t, err)
	w.outbox = outbox.New(w.db)
	w.relay, err = outbox.NewRelay(w.outbox, &outbox.RelayConfig{Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error { return nil })})
	require.NoError(t, err)
	w.fake = providertest.New(providertest.Rates{}, 1)
	w.x, err = sideeffect.New(w.db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: w.fake}}, MaxAttempts: 1})
	require.NoError(t, err)

	req := ledger.Request{Scope: "acme|POST /v1/orders", Key: "done", Fingerprint: ledger.Fingerprint{1}}
	_, err = w.l.Do(ctx, req, func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
	require.NoError(t, err)
	out, err := w.l.Claim(ctx, ledger.Request{Scope: "acme|POST /v1/pay", Key: "working", Fingerprint: ledger.Fingerprint{2}})
	require.NoError(t, err)
	w.claim = out.Claim
	_, err = w.inbox.Handle(ctx, "billing", "msg-1", func(kv.Tx) error { return nil })
	require.NoError(t, err)
	_, _, err = w.outbox.Add(ctx, outbox.Event{ID: "published", Topic: "order.paid"})
	require.NoError(t, err)
	_, err = w.relay.RunOnce(ctx)
	require.NoError(t, err)

	spec := func(k string) sideeffect.Spec {
		return sideeffect.Spec{Kind: "charge", Subject: k, Scope: "s", Key: k, Purpose: "charge"}
	}
	in, _, err := w.x.Create(ctx, spec("done"))
	require.NoError(t, err)
	w.done = in.ID
	_, err = w.x.Execute(ctx, in.ID)
	require.NoError(t, err)
	in, _, err = w.x.Create(ctx, spec("pending"))
	require.NoError(t, err)
	w.pending = in.ID
	w.fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	in, _, err = w.x.Create(ctx, spec("parked"))
	require.NoError(t, err)
	w.parked = in.ID
	parked, err := w.x.Execute(ctx, in.ID) // MaxAttempts 1: parked at once
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateNeedsAttention, parked.State)
	// An event that is never published (its relay is not run again).
	_, _, err = w.outbox.Add(ctx, outbox.Event{ID: "unpublished", Topic: "order.paid"})
	require.NoError(t, err)
	return w
}

// to moves the clock to target in steps of at most 12 hours, the worker
// holding the claim renewing its lease (and so its record) at every step,
// as a heartbeat would.
func (w *world) to(t *testing.T, target time.Time) {
	for w.clock.Now().Before(target) {
		next := w.clock.Now().Add(12 * time.Hour)
		if next.After(target) {
			next = target
		}
		w.clock.Set(next)
		require.NoError(t, w.l.Extend(ctx, w.claim))
	}
}

func sweep(t *testing.T, db *kv.DB) retention.Stats {
	t.Helper()
	st, err := retention.Sweep(ctx, db, nil, allKinds...)
	require.NoError(t, err)
	return st
}

// Records of every kind expire exactly at their retention, are absent to
// readers from that instant, and are removed by the sweep; records without a
// retention survive any number of sweeps.
func TestEveryKindExpiresExactlyAtItsRetention(t *testing.T) {
	t.Parallel()
	w := build(t)
	deadlines := []struct {
		kind  retention.Kind
		after time.Duration
		alive func() bool
	}{
		{retention.PublishedEvents, retention.DefaultPublishedEvents, func() bool {
			_, added, err := w.outbox.Add(ctx, outbox.Event{ID: "probe-" + fmt.Sprint(w.clock.Now().UnixNano()), Topic: "t"})
			require.NoError(t, err)
			_ = added
			var n int
			require.NoError(t, w.db.View(ctx, func(tx kv.Tx) error {
				n = 0 // a read run again (etcd) starts afresh
				for e, err := range outbox.Events(tx, outbox.EventPublished) {
					require.NoError(t, err)
					if e.ID == "published" {
						n++
					}
				}
				return nil
			}))
			return n == 1
		}},
		{retention.Idempotency, retention.DefaultIdempotency, func() bool {
			_, err := w.l.Get(ctx, "acme|POST /v1/orders", "done")
			return err == nil
		}},
		{retention.Inbox, retention.DefaultInbox, func() bool {
			seen, err := w.inbox.Seen(ctx, "billing", "msg-1")
			require.NoError(t, err)
			return seen
		}},
		{retention.FinishedIntents, retention.DefaultFinishedIntents, func() bool {
			_, err := w.x.Get(ctx, w.done)
			return err == nil
		}},
	}
	for _, d := range deadlines {
		// The worker with the claim keeps its lease alive all along.
		w.to(t, t0.Add(d.after-time.Nanosecond))
		require.True(t, d.alive(), "%s alive 1ns before its retention", d.kind)
		st := sweep(t, w.db)
		require.Zero(t, st.Kinds[d.kind].Deleted, "%s swept early", d.kind)

		w.to(t, t0.Add(d.after))
		if d.kind != retention.PublishedEvents {
			require.False(t, d.alive(), "%s is absent to readers at its retention, before any sweep", d.kind)
		}
		st = sweep(t, w.db)
		require.Equal(t, 1, st.Kinds[d.kind].Deleted, "%s swept at its retention", d.kind)
		if d.kind == retention.PublishedEvents {
			require.False(t, d.alive())
		}
	}

	// A year later, after many sweeps: the live claim, the pending and the
	// parked intents and the unpublished event are all still there.
	for range 5 {
		w.to(t, w.clock.Now().Add(73*24*time.Hour))
		sweep(t, w.db)
	}
	rec, err := w.l.Get(ctx, "acme|POST /v1/pay", "working")
	require.NoError(t, err)
	require.Equal(t, ledger.StatusInProgress, rec.Status)
	for _, id := range []string{w.pending, w.parked} {
		_, err := w.x.Get(ctx, id)
		require.NoError(t, err)
	}
	lag, err := w.outbox.Lag(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, lag.Pending, 1)
}

func fill(t *testing.T, l *ledger.Ledger, prefix string, n int) {
	t.Helper()
	chunk := 1000
	if m := l.DB().Traits().MaxTxOps; m > 0 {
		chunk = max(1, m/4) // a record, its expiry index entry and its usage counter
	}
	for i := 0; i < n; i += chunk {
		require.NoError(t, l.DB().Update(ctx, func(tx kv.Tx) error {
			for j := i; j < min(i+chunk, n); j++ {
				_, err := l.DoTx(ctx, tx, ledger.Request{Scope: "acme|POST /v1/orders", Key: fmt.Sprintf("%s-%07d", prefix, j), Fingerprint: ledger.Fingerprint{1}},
					func(kv.Tx) (ledger.Response, error) {
						return ledger.Response{Status: 201, Body: []byte(`{"id":"ord"}`)}, nil
					})
				if err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

func TestBatchesDryRunAndCancel(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	old, young, batch := 3000, 500, 250
	if kvtest.Remote() && testing.Short() {
		old, young, batch = 600, 100, 50 // every operation is a network round trip there
	}
	fill(t, l, "old", old)
	clock.Advance(30 * time.Minute)
	fill(t, l, "new", young)
	clock.Advance(30 * time.Minute) // "old" expired, "new" has 30 minutes left

	dry, err := retention.Sweep(ctx, db, &retention.Config{DryRun: true, BatchSize: batch}, allKinds...)
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.Equal(t, old, dry.Kinds[retention.Idempotency].Deleted)
	require.Equal(t, old, dry.Deleted(), "the sum over kinds")
	n := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0 // a read run again (etcd) starts afresh
		for range l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			n++
		}
		return nil
	}))
	require.Equal(t, old+young, n, "a dry run removes nothing")

	// A canceled sweep stops between batches with a consistent database.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = retention.Sweep(cctx, db, &retention.Config{BatchSize: 100}, allKinds...)
	require.ErrorIs(t, err, context.Canceled)

	st, err := retention.Sweep(ctx, db, &retention.Config{BatchSize: batch}, ledger.RecordKind)
	require.NoError(t, err)
	ks := st.Kinds[retention.Idempotency]
	require.Equal(t, old, ks.Deleted)
	require.Equal(t, old, st.Deleted())
	require.Equal(t, old, ks.Examined, "only expired entries are read")
	require.GreaterOrEqual(t, ks.Batches, old/batch)
	require.Positive(t, ks.LongestTx)
	require.Len(t, st.Kinds, 1)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0
		for r, err := range l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			require.NoError(t, err)
			require.Contains(t, r.Key, "new-")
			n++
		}
		require.Equal(t, young, n)
		return nil
	}))
}

// Requests keep being served while a large sweep runs: the sweep's write
// transactions are short and it yields between them.
func TestRequestsServedDuringSweep(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	n := 40000
	switch {
	case kvtest.Remote() && testing.Short():
		n = 300
	case kvtest.Remote():
		n = 1500 // every operation is a network round trip there
	}
	fill(t, l, "old", n)
	clock.Advance(2 * time.Hour)

	var sweeping atomic.Bool
	var duringSweep atomic.Int64
	sweeping.Store(true)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: fmt.Sprintf("live-%d-%d", g, i), Fingerprint: ledger.Fingerprint{1}},
					func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
				require.NoError(t, err)
				if sweeping.Load() {
					duringSweep.Add(1)
				}
			}
		})
	}
	st, err := retention.Sweep(ctx, db, &retention.Config{BatchSize: 500}, allKinds...)
	sweeping.Store(false)
	close(stop)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, n, st.Kinds[retention.Idempotency].Deleted)
	require.Positive(t, duringSweep.Load(), "requests completed while the sweep ran")
	t.Logf("sweep of %d: %d batches, longest transaction %s, %d requests served meanwhile",
		n, st.Kinds[retention.Idempotency].Batches, st.LongestTx(), duringSweep.Load())
}

// Pages freed by sweeps are reused: repeated fill/sweep cycles do not keep
// growing the file.
func TestFileIsReusedAcrossSweeps(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "measures the bbolt file's size")
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "reuse.db")
	db := kvtest.OpenPath(t, path, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	var sizes []int64
	for cycle := range 6 {
		fill(t, l, fmt.Sprint("c", cycle), 20000)
		clock.Advance(2 * time.Hour)
		st := sweep(t, db)
		require.Equal(t, 20000, st.Kinds[retention.Idempotency].Deleted)
		fi, err := os.Stat(path)
		require.NoError(t, err)
		sizes = append(sizes, fi.Size())
	}
	t.Logf("file size after each fill/sweep cycle: %v", sizes)
	require.LessOrEqual(t, sizes[5], sizes[1]+sizes[1]/10, "the file stopped growing: %v", sizes)
}

func TestRunStopsWithContext(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, allChecks...)
	rctx, cancel := context.WithCancel(ctx)
	sweeps := make(chan retention.Stats, 4)
	done := make(chan error)
	go func() {
		done <- retention.Run(rctx, db, nil, time.Hour, func(s retention.Stats, err error) {
			require.NoError(t, err)
			sweeps <- s
		}, allKinds...)
	}()
	testwait.Receive(t, sweeps, "the first sweep")
	cancel()
	require.ErrorIs(t, testwait.Receive(t, done, "the sweeper's end"), context.Canceled)
	require.Error(t, retention.Run(ctx, db, nil, 0, nil, allKinds...))
}

// Run ends, with kv.ErrClosed, as soon as the database closes (kv.DB.Done),
// though it sweeps once an hour, rather than sleeping beside a closed
// database until its next sweep; onSweep has the error too.
func TestRunEndsWhenTheDatabaseCloses(t *testing.T) {
	t.Parallel()
	for _, r := range looptest.Refusals {
		t.Run(r.Name, func(t *testing.T) {
			db := kvtest.Open(t, &kv.Options{NoSync: true}, allChecks...)
			looptest.EndsWhen(t, r, db, func(ctx context.Context, onPass func(error)) error {
				return retention.Run(ctx, db, nil, time.Hour, func(_ retention.Stats, err error) { onPass(err) }, allKinds...)
			})
		})
	}
}

// Run ends, with an error matching kv.ErrSyncFailed, at the sweep whose
// commit (expired records removed) had its sync fail after the meta page
// was written: the database refuses every call from then on.
func TestRunEndsWhenASyncFails(t *testing.T) {
	looptest.EndsWhenSyncFails(t, func(path string) {
		clock := kvtest.NewManualClock(time.Now().Add(-48 * time.Hour)) // expired by now
		db := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, allChecks...)
		kvtest.RequireBolt(t, db)
		l, err := ledger.New(db, &ledger.Config{Retention: time.Hour})
		require.NoError(t, err)
		fill(t, l, "old", 10)
		require.NoError(t, db.Close())
	}, func(ctx context.Context, db *kv.DB, onPass func(error)) error {
		return retention.Run(ctx, db, nil, 10*time.Millisecond, func(_ retention.Stats, err error) { onPass(err) }, allKinds...)
	})
}

// A sweep that panics (here an observer's) is that sweep's error, passed
// to onSweep and logged with its stack through Config.Logger; the next
// sweep comes an interval later, and the process goes on.
func TestRunGoesOnPastAPanic(t *testing.T) {
	t.Parallel()
	var reports atomic.Int32
	db := kvtest.Open(t, &kv.Options{NoSync: true, Observer: &observe.Observer{Sweep: func(observe.Sweep) {
		if reports.Add(1) == 1 {
			panic("observer bug")
		}
	}}}, allChecks...)
	logger, logs := testlog.New()
	rctx, cancel := context.WithCancel(ctx)
	sweeps := make(chan error, 1000)
	done := make(chan error, 1)
	go func() {
		done <- retention.Run(rctx, db, &retention.Config{Logger: logger}, 10*time.Millisecond,
			func(_ retention.Stats, err error) { sweeps <- err }, allKinds...)
	}()
	require.ErrorContains(t, testwait.Receive(t, sweeps, "the sweep that panicked"), "a pass of the retention sweeper panicked: observer bug")
	require.NoError(t, testwait.Receive(t, sweeps, "the sweep after it"), "the next sweep")
	cancel()
	require.ErrorIs(t, testwait.Receive(t, done, "the sweeper's end"), context.Canceled)
	require.Contains(t, logs.String(), `level=ERROR msg="retention sweeper pass panicked" panic="observer bug"`)
	require.Contains(t, logs.String(), "TestRunGoesOnPastAPanic", "the stack names the observer")
}

// A policy's per-scope override, handed to the ledger, decides when a
// record expires and when the sweep removes it.
func TestPolicyWiredIntoTheLedger(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	pol := retention.Policy{Idempotency: time.Hour, Overrides: []retention.Override{{Kind: retention.Idempotency, ScopePrefix: "vip|", Retention: 48 * time.Hour}}}
	require.NoError(t, pol.Validate(retention.Constraints{Lease: time.Minute}))
	l, err := ledger.New(db, &ledger.Config{Lease: time.Minute, RetentionFor: pol.Func(retention.Idempotency)})
	require.NoError(t, err)
	for _, scope := range []string{"basic|POST /x", "vip|POST /x"} {
		_, err := l.Do(ctx, ledger.Request{Scope: scope, Key: "k", Fingerprint: ledger.Fingerprint{1}}, func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.NoError(t, err)
	}
	clock.Advance(2 * time.Hour)
	st := sweep(t, db)
	require.Equal(t, 1, st.Kinds[retention.Idempotency].Deleted)
	_, err = l.Get(ctx, "basic|POST /x", "k")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	rec, err := l.Get(ctx, "vip|POST /x", "k")
	require.NoError(t, err)
	require.Equal(t, t0.Add(48*time.Hour), rec.ExpiresAt)
}

// A completed sweep is recorded in the database (a dry run is not): the
// console and the CLI show when records were last removed.
func TestLastSweepIsRecorded(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	_, ok, err := retention.Last(ctx, db)
	require.NoError(t, err)
	require.False(t, ok)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	fill(t, l, "old", 5)
	clock.Advance(2 * time.Hour)
	_, err = retention.Sweep(ctx, db, &retention.Config{DryRun: true}, allKinds...)
	require.NoError(t, err)
	_, ok, err = retention.Last(ctx, db)
	require.NoError(t, err)
	require.False(t, ok, "a dry run is not a sweep")
	_, err = retention.Sweep(ctx, db, nil, allKinds...)
	require.NoError(t, err)
	last, ok, err := retention.Last(ctx, db)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 5, last.Deleted["idempotency"])
	require.True(t, last.At.Equal(clock.Now()))
}

// An override with an empty scope prefix applies to every scope of its
// kind, and of two overrides with the same prefix the first wins (mutants
// of the longest-prefix rule survived every test before: make mutate).
func TestPolicyEmptyPrefixAndTies(t *testing.T) {
	t.Parallel()
	p := retention.Policy{Overrides: []retention.Override{
		{Kind: retention.Idempotency, ScopePrefix: "", Retention: 2 * time.Hour},
		{Kind: retention.Idempotency, ScopePrefix: "acme|", Retention: 3 * time.Hour},
		{Kind: retention.Idempotency, ScopePrefix: "acme|", Retention: 4 * time.Hour},
	}}
	require.Equal(t, 2*time.Hour, p.For(retention.Idempotency, "globex|POST /x"))
	require.Equal(t, 3*time.Hour, p.For(retention.Idempotency, "acme|POST /x"), "the first of equal prefixes")
}

// MaxTxTime bounds a write transaction: with 1ns each batch removes one
// record and goes on where it stopped; every sweep reaches the observer.
func TestMaxTxTimeAndObserver(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("Windows's monotonic clock moves in ticks: a batch of a few records takes no time by it, and 1ns does not cut it")
	}
	clock := kvtest.NewManualClock(t0)
	var sweeps []observe.Sweep
	var mu sync.Mutex
	obs := &observe.Observer{Sweep: func(e observe.Sweep) { mu.Lock(); sweeps = append(sweeps, e); mu.Unlock() }}
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: obs}, allChecks...)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	fill(t, l, "old", 7)
	clock.Advance(2 * time.Hour)
	st, err := retention.Sweep(ctx, db, &retention.Config{MaxTxTime: time.Nanosecond, Pause: -1}, ledger.RecordKind)
	require.NoError(t, err)
	ks := st.Kinds[retention.Idempotency]
	require.Equal(t, 7, ks.Deleted)
	require.Equal(t, 7, ks.Examined)
	require.Equal(t, 7, ks.Batches, "one record per transaction: the time bound cut each batch")
	require.Equal(t, []observe.Sweep{{Kind: "idempotency", Deleted: 7, Examined: 7, Batches: 7, Duration: sweeps[0].Duration}}, sweeps)
}

// MaxTxTime counts from the transaction's start, not from the wait for the
// writer before it: a sweep queued behind a write held longer than its
// budget still removes a whole batch in its first transaction (it removed
// one record, the budget spent before it began).
func TestMaxTxTimeStartsWithTheTransaction(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	if !db.Traits().SingleWriter {
		t.Skip("a backend with several writers has no writer to wait for")
	}
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	fill(t, l, "old", 7)
	clock.Advance(2 * time.Hour)

	holding, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	hold := sync.OnceFunc(func() { close(holding) }) // the rerun build runs the function twice
	go func() {
		held <- db.Update(ctx, func(kv.Tx) error { hold(); <-release; return nil })
	}()
	testwait.Receive(t, holding, "the long write holds the writer")
	const budget = 200 * time.Millisecond
	type result struct {
		st  retention.Stats
		err error
	}
	swept := make(chan result, 1)
	go func() {
		st, err := retention.Sweep(ctx, db, &retention.Config{MaxTxTime: budget, Pause: -1}, ledger.RecordKind)
		swept <- result{st, err}
	}()
	require.Eventually(t, func() bool { return db.Writer().Queued == 1 }, time.Minute, time.Millisecond, "the sweep waits for the writer")
	time.Sleep(budget + 100*time.Millisecond) // the long write outlasts the sweep's budget
	close(release)
	require.NoError(t, testwait.Receive(t, held, "the long write"))
	r := testwait.Receive(t, swept, "the sweep")
	require.NoError(t, r.err)
	ks := r.st.Kinds[retention.Idempotency]
	require.Equal(t, 7, ks.Deleted)
	require.Equal(t, 1, ks.Batches, "the whole batch in the first transaction")
}

// Pause is honoured between batches: a sweep told to pause for an hour is
// still pausing after its first batch when its context ends.
func TestPauseBetweenBatches(t *testing.T) {
	t.Parallel()
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, allChecks...)
	l, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	fill(t, l, "old", 10)
	clock.Advance(2 * time.Hour)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var st retention.Stats
	var err error
	go func() {
		defer close(done)
		// MaxTxTime out of the way: on a loaded etcd five deletes can take
		// longer than its default 50ms, which cut the batch short (4 or
		// fewer removed, never 5) and failed this test twice.
		st, err = retention.Sweep(cctx, db, &retention.Config{BatchSize: 5, Pause: time.Hour, MaxTxTime: time.Hour}, ledger.RecordKind)
	}()
	require.Eventually(t, func() bool {
		select {
		case <-done:
			t.Fatalf("the sweep returned before its pause: %+v, %v", st, err)
		default:
		}
		n := 0
		_ = db.View(ctx, func(tx kv.Tx) error {
			n = 0
			for range l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
				n++
			}
			return nil
		})
		return n == 5
	}, 30*time.Second, 5*time.Millisecond, "the first batch of 5 is removed")
	// Still pausing a while later (a default 1ms pause would have run the
	// second batch by now; a slow machine can only make this pass more).
	time.Sleep(50 * time.Millisecond)
	left := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		left = 0
		for range l.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			left++
		}
		return nil
	}))
	require.Equal(t, 5, left, "the sweep pauses between batches")
	cancel()
	testwait.Receive(t, done, "the sweep's end")
	require.ErrorIs(t, err, context.Canceled, "canceled during the pause")
	require.Equal(t, 5, st.Kinds[retention.Idempotency].Deleted)
	require.Equal(t, 1, st.Kinds[retention.Idempotency].Batches)
}

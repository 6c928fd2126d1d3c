package sideeffect_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

var ctx = context.Background()

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// completions counts what the handler's completions wrote: the business
// state they leave in the "orders" bucket is what a user relies on.
type completions struct {
	succeeded, failed atomic.Int32
}

func handler(p sideeffect.Provider, c *completions) sideeffect.Handler {
	return sideeffect.Handler{
		Provider: p,
		OnSucceeded: func(tx kv.Tx, in *sideeffect.Intent) error {
			c.succeeded.Add(1) // may count a rolled-back run; tests compare with the database
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte(in.Subject), []byte("paid:"+string(in.Result)))
		},
		OnFailed: func(tx kv.Tx, in *sideeffect.Intent) error {
			c.failed.Add(1)
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte(in.Subject), []byte("declined:"+in.LastError))
		},
	}
}

type bundle struct {
	db    *kv.DB
	clock *kvtest.ManualClock
	path  string
	comp  *completions
}

func config(p sideeffect.Provider, c *completions) sideeffect.Config {
	return sideeffect.Config{
		Handlers:    map[string]sideeffect.Handler{"charge": handler(p, c)},
		Grace:       10 * time.Second,
		Lease:       time.Minute,
		CallTimeout: 5 * time.Second,
		MaxAttempts: 4,
		Backoff:     sideeffect.Backoff{Base: time.Second, Cap: 10 * time.Second},
	}
}

func setup(t *testing.T, p sideeffect.Provider) (*sideeffect.Executor, *bundle) {
	t.Helper()
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "se.db")
	db := kvtest.OpenPath(t, path, &kv.Options{NoSync: true, Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	c := &completions{}
	x, err := sideeffect.New(db, ptr(config(p, c)))
	require.NoError(t, err)
	return x, &bundle{db: db, clock: clock, path: path, comp: c}
}

func spec(order string) sideeffect.Spec {
	return sideeffect.Spec{Kind: "charge", Subject: "order/" + order, Scope: "acme|POST /v1/orders/{id}/pay", Key: "pay-" + order, Purpose: "charge", Payload: []byte(`{"amount_cents":2500}`)}
}

func orderState(t *testing.T, db *kv.DB, order string) string {
	var v string
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		if b := tx.Bucket([]byte("orders")); b != nil {
			v = string(b.Get([]byte("order/" + order)))
		}
		return nil
	}))
	return v
}

func TestDownstreamKeyIsDeterministic(t *testing.T) {
	t.Parallel()
	a := sideeffect.DownstreamKey("acme|POST /pay", "k1", "charge")
	require.Equal(t, a, sideeffect.DownstreamKey("acme|POST /pay", "k1", "charge"))
	require.Len(t, a, 36)
	require.Equal(t, byte('5'), a[14], "a version-5 UUID")
	for _, other := range []string{
		sideeffect.DownstreamKey("globex|POST /pay", "k1", "charge"),
		sideeffect.DownstreamKey("acme|POST /pay", "k2", "charge"),
		sideeffect.DownstreamKey("acme|POST /pay", "k1", "refund"),
		sideeffect.DownstreamKey("acme|POST /pay", "k1c", "harge"),
	} {
		require.NotEqual(t, a, other)
	}
}

func TestCreateIsIdempotentAndValidated(t *testing.T) {
	t.Parallel()
	x, bb := setup(t, providertest.New(providertest.Rates{}, 1))
	in, created, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, sideeffect.StatePending, in.State)
	require.Equal(t, sideeffect.DownstreamKey("acme|POST /v1/orders/{id}/pay", "pay-1", "charge"), in.DownstreamKey)
	require.Equal(t, in.DownstreamKey, in.ID)
	require.Equal(t, t0.Add(10*time.Second), in.NextAttemptAt, "due after the grace period")
	again, created, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, in, again)

	for _, s := range []sideeffect.Spec{{}, {Kind: "charge"}, {Kind: "charge", Key: "k"}, {Kind: "nope", Key: "k", Purpose: "p"}} {
		_, _, err := x.Create(ctx, s)
		require.Error(t, err)
	}
	_, _ = bb, in
}

func TestExecuteFirstAttemptCallsDo(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	x, bb := setup(t, fake)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	out, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, out.State)
	require.Equal(t, []byte("ch_0001"), out.Result)
	require.Equal(t, 1, out.Attempts)
	require.Equal(t, uint64(2), out.Version)
	require.Equal(t, []string{"do:charged"}, fake.Ops(in.ID))
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))

	// Executing a final intent changes nothing and calls nobody.
	again, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, out, again)
	require.Len(t, fake.Log(), 1)
	_, err = x.Execute(ctx, "no-such-intent")
	require.ErrorIs(t, err, sideeffect.ErrNotFound)
}

// crashAfterCharge is a provider that charges and then "kills the process":
// it closes the database before the outcome can be recorded, so only the
// file survives, as after a crash.
func crashAfterCharge(fake *providertest.Fake, db **kv.DB) sideeffect.Provider {
	return sideeffect.ProviderFunc{
		DoFunc: func(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
			rep, err := fake.Do(ctx, c)
			_ = (*db).Close()
			return rep, err
		},
		StatusFunc: fake.Status,
	}
}

// The failure that matters most: the provider charges, the response never
// arrives, the process dies. After a restart the reconciler asks for the
// key's status, finds the charge, finishes the intent and applies the
// completion; the provider holds exactly one charge.
func TestLostResponseThenRestartReconcilerAsksStatus(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "an attempt of a dead process is picked up at once only where one process writes")
	clock := kvtest.NewManualClock(t0)
	path := filepath.Join(t.TempDir(), "crash.db")
	fake := providertest.New(providertest.Rates{}, 1)

	db1, err := kv.Open(path, &kv.Options{Clock: clock})
	require.NoError(t, err)
	c1 := &completions{}
	x1, err := sideeffect.New(db1, ptr(config(crashAfterCharge(fake, &db1), c1)))
	require.NoError(t, err)
	in, _, err := x1.Create(ctx, spec("1"))
	require.NoError(t, err)
	_, err = x1.Execute(ctx, in.ID)
	require.ErrorIs(t, err, kv.ErrClosed, "the process died before recording")
	require.Len(t, fake.Charges(), 1)

	// A new process opens the file. The intent was in flight for a process
	// that no longer exists: the reconciler picks it up at once.
	db2 := kvtest.OpenPath(t, path, &kv.Options{Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	c2 := &completions{}
	x2, err := sideeffect.New(db2, ptr(config(fake, c2)))
	require.NoError(t, err)
	got, err := x2.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StatePending, got.State)
	require.Equal(t, 1, got.Attempts)

	stats, err := x2.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Examined)
	require.Equal(t, 1, stats.Succeeded)
	got, err = x2.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, got.State)
	require.Equal(t, "paid:ch_0001", orderState(t, db2, "1"))
	require.Equal(t, []string{"do:charged", "status:succeeded"}, fake.Ops(in.ID), "asked, never charged again")
	require.Len(t, fake.Charges(), 1)
}

// Not found: the first call failed before reaching the provider; the
// reconciler asks, hears not_found, and sends it again with the same key.
func TestNotFoundIsResentWithTheSameKey(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	first := true
	fake.Script = func(op string, c sideeffect.Call) providertest.Fault {
		if op == "do" && first {
			first = false
			return providertest.FailBeforeCharge
		}
		return providertest.None
	}
	x, bb := setup(t, fake)
	in, _, _ := x.Create(ctx, spec("1"))
	out, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateUnknown, out.State)
	require.Contains(t, out.LastError, "provider unavailable")
	require.False(t, out.NextAttemptAt.Before(t0), "backoff is in the future")
	require.LessOrEqual(t, out.NextAttemptAt.Sub(t0), time.Second, "first backoff within [0, base]")

	stats, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Examined, "not due before its backoff")

	bb.clock.Advance(time.Second)
	stats, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Succeeded)
	require.Equal(t, []string{"do:failed", "status:not_found", "do:charged"}, fake.Ops(in.ID))
	for _, r := range fake.Log() {
		require.Equal(t, in.DownstreamKey, r.DownstreamKey, "every call carries the same key")
	}
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))
}

func TestFailedRunsFailureCompletion(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{Decline: 1}, 1)
	x, bb := setup(t, fake)
	in, _, _ := x.Create(ctx, spec("1"))
	out, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateFailed, out.State)
	require.Equal(t, "card_declined", out.LastError)
	require.Equal(t, t0, out.FinishedAt)
	require.Equal(t, "declined:card_declined", orderState(t, bb.db, "1"))
	require.Empty(t, fake.Charges())
}

// neverKnown is a provider script whose charge fails before it is made and
// whose status is never known: every attempt is unknown.
func neverKnown(op string, _ sideeffect.Call) providertest.Fault {
	if op == "do" {
		return providertest.FailBeforeCharge
	}
	return providertest.StatusUnknown
}

// Unknown outcomes back off with full jitter and, after the bound, park the
// intent as needs_attention, where no pass touches it until requeued.
func TestUnknownBacksOffThenNeedsAttention(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = neverKnown
	x, bb := setup(t, fake)
	in, _, _ := x.Create(ctx, spec("1"))
	out, err := x.Execute(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateUnknown, out.State)

	ceilings := []time.Duration{2 * time.Second, 4 * time.Second}
	for i, ceiling := range ceilings {
		now := bb.clock.Advance(10 * time.Second)
		stats, err := x.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, stats.Unknown, "pass %d", i)
		got, _ := x.Get(ctx, in.ID)
		require.Equal(t, sideeffect.StateUnknown, got.State)
		require.Equal(t, i+2, got.Attempts)
		wait := got.NextAttemptAt.Sub(now)
		require.GreaterOrEqual(t, wait, time.Duration(0))
		require.LessOrEqual(t, wait, ceiling, "full jitter within [0, base*2^(n-1)]")
		require.Contains(t, got.LastError, "status")
	}
	bb.clock.Advance(10 * time.Second)
	stats, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.NeedsAttention)
	got, _ := x.Get(ctx, in.ID)
	require.Equal(t, sideeffect.StateNeedsAttention, got.State)
	require.Equal(t, 4, got.Attempts)

	for range 3 {
		bb.clock.Advance(time.Hour)
		stats, err = x.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, stats.Examined, "parked intents are left alone")
	}
	_, err = x.Execute(ctx, in.ID)
	require.ErrorIs(t, err, sideeffect.ErrNeedsAttention)
	require.Equal(t, []string{"do:failed", "status:unknown", "status:unknown", "status:unknown"}, fake.Ops(in.ID))
	require.Empty(t, orderState(t, bb.db, "1"))

	// An operator fixes the cause and requeues: the next pass asks first.
	fake.Script = nil
	_, err = x.Requeue(ctx, in.ID)
	require.NoError(t, err)
	stats, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Succeeded)
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))
}

func TestResolveByHand(t *testing.T) {
	t.Parallel()
	x, bb := setup(t, providertest.New(providertest.Rates{}, 1))
	in, _, _ := x.Create(ctx, spec("1"))
	out, err := x.Resolve(ctx, in.ID, sideeffect.StateSucceeded, []byte("ch_manual"), "")
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, out.State)
	require.Equal(t, "paid:ch_manual", orderState(t, bb.db, "1"))
	_, err = x.Resolve(ctx, in.ID, sideeffect.StateFailed, nil, "x")
	require.Error(t, err)
	_, err = x.Resolve(ctx, in.ID, sideeffect.StatePending, nil, "")
	require.Error(t, err)
}

// A stale executor — one that stalled past its lease and was taken over —
// writes nothing when it finally returns.
func TestStaleExecutorWritesNothing(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	slow := sideeffect.ProviderFunc{
		DoFunc: func(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
			if calls.Add(1) == 1 {
				close(entered)
				<-release
			}
			return fake.Do(ctx, c)
		},
		StatusFunc: fake.Status,
	}
	x, bb := setup(t, slow)
	in, _, _ := x.Create(ctx, spec("1"))
	done := make(chan error)
	go func() {
		_, err := x.Execute(ctx, in.ID)
		done <- err
	}()
	testwait.Receive(t, entered, "the provider called")

	// The first executor is stuck in the provider call; its lease runs out
	// and the reconciler takes the intent over and finishes it.
	bb.clock.Advance(2 * time.Minute)
	stats, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, stats.Succeeded)
	got, _ := x.Get(ctx, in.ID)
	require.Equal(t, uint64(3), got.Version)

	close(release)
	err = testwait.Receive(t, done, "the stale executor's answer")
	var stale *sideeffect.StaleError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, uint64(2), stale.Executed)
	require.Equal(t, uint64(3), stale.Current)
	after, _ := x.Get(ctx, in.ID)
	require.Equal(t, got, after, "the stale executor wrote nothing")
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))
	require.Len(t, fake.Charges(), 1)
}

// 200 intents through the executor and the reconciler with 30% injected
// provider faults: every intent ends succeeded, failed or needs_attention;
// no key is ever sent after the provider took it (no blind retry); every
// succeeded order is paid with its one charge.
func TestManyIntentsUnderFaults(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{FailBeforeCharge: 0.10, LoseResponse: 0.10, Decline: 0.05, StatusUnknown: 0.05}, 42)
	x, bb := setup(t, fake)
	const n = 200
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		in, _, err := x.Create(ctx, spec(fmt.Sprint(i)))
		require.NoError(t, err)
		ids[i] = in.ID
	}
	sem := make(chan struct{}, 16)
	for _, id := range ids {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := x.Execute(ctx, id)
			require.NoError(t, err)
		})
	}
	wg.Wait()
	for pass := 0; pass < 50; pass++ {
		bb.clock.Advance(time.Minute)
		stats, err := x.RunOnce(ctx)
		require.NoError(t, err)
		if stats.Examined == 0 {
			break
		}
	}
	charges := map[string]providertest.Charge{}
	for _, c := range fake.Charges() {
		charges[c.DownstreamKey] = c
	}
	final := map[sideeffect.State]int{}
	for i, id := range ids {
		in, err := x.Get(ctx, id)
		require.NoError(t, err)
		final[in.State]++
		ok := 0
		for _, op := range fake.Ops(id) {
			if op == "do:charged" || op == "do:replayed" || op == "do:lost" {
				ok++
			}
			require.NotEqual(t, "do:replayed", op, "a key the provider already took was sent again")
		}
		require.LessOrEqual(t, ok, 1, "intent %s: %v", id, fake.Ops(id))
		switch in.State {
		case sideeffect.StateSucceeded:
			require.Equal(t, "paid:"+charges[id].ID, orderState(t, bb.db, fmt.Sprint(i)))
		case sideeffect.StateFailed:
			require.NotContains(t, charges, id)
			require.True(t, strings.HasPrefix(orderState(t, bb.db, fmt.Sprint(i)), "declined:"))
		case sideeffect.StateNeedsAttention:
			require.Empty(t, orderState(t, bb.db, fmt.Sprint(i)))
		default:
			t.Fatalf("intent %s ended %s", id, in.State)
		}
	}
	t.Logf("final states: %v; provider calls: %d; charges: %d", final, len(fake.Log()), len(charges))
	require.Greater(t, final[sideeffect.StateSucceeded], n/2)
}

// The background loop is woken by new intents, stops with its context, and
// leaves no goroutine behind (goleak in TestMain).
func TestRunLoopWakesAndStops(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	c := &completions{}
	cfg := config(fake, c)
	cfg.Grace = time.Nanosecond
	cfg.PollInterval = time.Hour
	x, err := sideeffect.New(db, &cfg)
	require.NoError(t, err)
	passes := make(chan sideeffect.RunStats, 16)
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- x.Run(runCtx, func(s sideeffect.RunStats, _ error) { passes <- s }) }()
	testwait.Receive(t, passes, "the first, empty pass")

	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	clock.Advance(time.Second) // past the grace period
	testwait.Until(t, passes, executedOne, "a pass that executes the intent")
	got, _ := x.Get(ctx, in.ID)
	require.Equal(t, sideeffect.StateSucceeded, got.State)
	cancel()
	require.ErrorIs(t, testwait.Receive(t, stopped, "the reconciler's end"), context.Canceled)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil, sideeffect.RecordKind, ledger.RecordKind)
	p := providertest.New(providertest.Rates{}, 1)
	for _, c := range []sideeffect.Config{
		{},
		{Handlers: map[string]sideeffect.Handler{"x": {}}},
		{Handlers: map[string]sideeffect.Handler{"x": {Provider: p}}, Lease: time.Second, CallTimeout: time.Minute},
		{Handlers: map[string]sideeffect.Handler{"x": {Provider: p}}, MaxAttempts: -1},
		// A reconciler pass with no worker waited for one until its context
		// ended; a negative backoff was taken as another default.
		{Handlers: map[string]sideeffect.Handler{"x": {Provider: p}}, Concurrency: -1},
		{Handlers: map[string]sideeffect.Handler{"x": {Provider: p}}, Backoff: sideeffect.Backoff{Base: -time.Second}},
		{Handlers: map[string]sideeffect.Handler{"x": {Provider: p}}, Backoff: sideeffect.Backoff{Cap: -time.Second}},
	} {
		_, err := sideeffect.New(db, &c)
		require.ErrorIs(t, err, sideeffect.ErrInvalidConfig)
	}
}

func ptr[T any](v T) *T { return &v }

func executedOne(s sideeffect.RunStats) bool { return s.Succeeded == 1 }

// Requeue wakes a running reconciler: a parked intent, made due by an
// operator, is not left until the next poll (an hour here).
func TestRequeueWakesTheReconciler(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock}, sideeffect.RecordKind, ledger.RecordKind)
	cfg := config(fake, &completions{})
	cfg.PollInterval = time.Hour
	x, err := sideeffect.New(db, &cfg)
	require.NoError(t, err)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	_, _ = x.Execute(ctx, in.ID)
	for in.State != sideeffect.StateNeedsAttention {
		clock.Advance(time.Minute)
		_, err := x.RunOnce(ctx)
		require.NoError(t, err)
		in, err = x.Get(ctx, in.ID)
		require.NoError(t, err)
	}
	fake.Script = nil // the provider is back

	passes := make(chan sideeffect.RunStats, 16)
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- x.Run(runCtx, func(s sideeffect.RunStats, _ error) { passes <- s }) }()
	testwait.Receive(t, passes, "the first pass: nothing due")
	_, err = x.Requeue(ctx, in.ID)
	require.NoError(t, err)
	// The next poll is an hour away: only Requeue's wake-up executes it.
	testwait.Until(t, passes, executedOne, "a pass that executes the requeued intent (Requeue wakes the reconciler)")
	got, err := x.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateSucceeded, got.State)
	cancel()
	require.ErrorIs(t, testwait.Receive(t, stopped, "the reconciler's end"), context.Canceled)
}

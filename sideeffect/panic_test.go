package sideeffect_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/looptest"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// panicky is a provider whose next calls panic: doPanics Do calls (after
// the charge went through when afterCharge, as a client library that
// panics decoding the answer would), statusPanics Status calls.
type panicky struct {
	*providertest.Fake
	doPanics, statusPanics atomic.Int32
	afterCharge            bool
}

func (p *panicky) Do(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
	if p.doPanics.Add(-1) >= 0 {
		if p.afterCharge {
			_, _ = p.Fake.Do(ctx, c)
		}
		panic("provider client: nil map in the answer")
	}
	return p.Fake.Do(ctx, c)
}

func (p *panicky) Status(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
	if p.statusPanics.Add(-1) >= 0 {
		panic("provider client: status panicked")
	}
	return p.Fake.Status(ctx, c)
}

// logged is setup with an executor that logs to a buffer the test reads;
// mutate, if set, edits its configuration first.
func logged(t *testing.T, p sideeffect.Provider, mutate func(*sideeffect.Config)) (*sideeffect.Executor, *bundle, *testlog.Buffer, sideeffect.Config) {
	t.Helper()
	_, bb := setup(t, p)
	logger, logs := testlog.New()
	cfg := config(p, bb.comp)
	cfg.Logger = logger
	if mutate != nil {
		mutate(&cfg)
	}
	x, err := sideeffect.New(bb.db, &cfg)
	require.NoError(t, err)
	return x, bb, logs, cfg
}

// A provider that panics may have acted: its outcome is unknown, as a lost
// answer's is. The reconciler (and the request that performs it) must not
// die with it: an intent that makes the provider panic would otherwise
// take the service down again after every restart. The attempt is
// recorded as unknown, logged with its stack, backed off; the next one
// asks Status first and finds the charge that went through (one charge);
// a provider that always panics parks the intent after MaxAttempts.
func TestProviderPanicIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	p := &panicky{Fake: providertest.New(providertest.Rates{}, 1), afterCharge: true}
	x, bb, logs, cfg := logged(t, p, nil)

	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	bb.clock.Advance(time.Minute)
	p.doPanics.Store(1)
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Unknown: 1}, st)
	got, err := x.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateUnknown, got.State)
	require.Equal(t, 1, got.Attempts)
	require.Contains(t, got.LastError, "sideeffect: provider's do panicked: provider client: nil map in the answer")
	require.Contains(t, logs.String(), `level=ERROR msg="provider panicked" id=`+in.ID+` kind=charge op=do panic="provider client: nil map in the answer"`)
	require.Contains(t, logs.String(), "panicky).Do", "the stack names the provider")
	require.Len(t, p.Charges(), 1, "the charge went through before the panic")

	// The next attempt asks first, and its Status panics too: still unknown.
	bb.clock.Advance(time.Minute)
	p.statusPanics.Store(1)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Unknown)
	got, err = x.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Contains(t, got.LastError, "status: sideeffect: provider's status panicked")

	// The one after finds the charge: succeeded, charged once.
	bb.clock.Advance(time.Minute)
	st, err = x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Succeeded)
	require.Len(t, p.Charges(), 1)
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))

	// A provider that always panics, before charging: parked after
	// MaxAttempts (4), nothing charged, the service still up.
	two, _, err := x.Create(ctx, spec("2"))
	require.NoError(t, err)
	p.afterCharge = false
	p.doPanics.Store(1 << 20)
	p.statusPanics.Store(1 << 20)
	for range cfg.MaxAttempts {
		bb.clock.Advance(time.Minute)
		_, err := x.RunOnce(ctx)
		require.NoError(t, err)
	}
	got, err = x.Get(ctx, two.ID)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateNeedsAttention, got.State)
	require.Equal(t, cfg.MaxAttempts, got.Attempts)
	require.Len(t, p.Charges(), 1)
}

// A panic in a handler's OnSucceeded (run in the transaction that records
// the outcome) during a reconciler pass rolls that transaction back and is
// the pass's error for that intent, logged with its stack; the process and
// the pass go on, and the intent completes once the handler is mended.
func TestReconcilerSurvivesAPanickingCompletion(t *testing.T) {
	t.Parallel()
	survivesABrokenCompletion(t, func() { panic("completion: index out of range") }, "completion: index out of range")
}

// survivesABrokenCompletion runs a reconciler pass over order 1's intent
// while its OnSucceeded calls breakIt (which panics with a value that
// prints as panicText), and requires that the pass logs the panic and
// records nothing, and that the intent completes, charged once, once the
// completion is mended.
func survivesABrokenCompletion(t *testing.T, breakIt func(), panicText string) {
	t.Helper()
	fake := providertest.New(providertest.Rates{}, 1)
	var broken atomic.Bool
	broken.Store(true)
	x, bb, logs, _ := logged(t, fake, func(cfg *sideeffect.Config) {
		h := cfg.Handlers["charge"]
		ok := h.OnSucceeded
		h.OnSucceeded = func(tx kv.Tx, in *sideeffect.Intent) error {
			if broken.Load() {
				breakIt()
			}
			return ok(tx, in)
		}
		cfg.Handlers["charge"] = h
	})

	in := failsOnePass(t, x, bb)
	require.Contains(t, logs.String(), `level=ERROR msg="intent completion panicked; its transaction rolled back" id=`+in.ID+` kind=charge hook=OnSucceeded panic="`+panicText)
	require.Contains(t, logs.String(), t.Name(), "the stack names the handler")
	require.Contains(t, logs.String(), `level=WARN msg="reconcile intent" id=`+in.ID+` error="sideeffect: completion of intent `+in.ID+` (succeeded): OnSucceeded panicked: `+panicText)
	require.NoError(t, bb.db.Err(), "the database is not at fault")
	got, err := x.Get(ctx, in.ID)
	require.NoError(t, err)
	require.False(t, got.State.Final(), "nothing recorded")
	require.Empty(t, orderState(t, bb.db, "1"))

	broken.Store(false)
	paysOnceWhenDue(t, x, bb.clock, bb.db, fake)
}

// failsOnePass creates order 1's intent and runs the reconciler pass
// after its grace, which must examine it and fail on it.
func failsOnePass(t *testing.T, x *sideeffect.Executor, bb *bundle) *sideeffect.Intent {
	t.Helper()
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	bb.clock.Advance(time.Minute)
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Errors: 1}, st)
	return in
}

// A completion whose panic is a memory fault (a page of the database the
// disk could not read: DB.IsFault) is not recovered as the completion's:
// kv sees it, and the database refuses every call from then on
// (kv.ErrReadFailed), where a recovered fault would leave the reconciler
// serving on a disk that fails its reads. Nothing is recorded.
func TestACompletionsReadFaultReachesKV(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	var fault looptest.Fault // on the file, once it is open
	x, bb, logs, _ := logged(t, fake, func(cfg *sideeffect.Config) {
		h := cfg.Handlers["charge"]
		h.OnSucceeded = func(kv.Tx, *sideeffect.Intent) error { panic(fault) }
		cfg.Handlers["charge"] = h
	})
	kvtest.RequireBolt(t, bb.db) // kv catches faults on bbolt's memory map
	fault = looptest.FaultOn(bb.db)
	failsOnePass(t, x, bb)
	require.ErrorIs(t, bb.db.Err(), kv.ErrReadFailed)
	require.Contains(t, logs.String(), "refuses every call since reading its file failed", "the intent's error is kv's refusal")
	require.NotContains(t, logs.String(), "intent completion panicked", "the fault is kv's, not the completion's")
}

// Any other panic in a pass (here the observer's, a service's metrics
// code) is that intent's error in the pass, logged: the pass and the
// process go on, and the intent is tried again, and charged once, when it
// is next due.
func TestReconcilerSurvivesAPanickingObserver(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	var broken atomic.Bool
	broken.Store(true)
	clock := kvtest.NewManualClock(t0)
	db := kvtest.Open(t, &kv.Options{NoSync: true, Clock: clock, Observer: &observe.Observer{
		ProviderCall: func(context.Context, observe.ProviderCall) {
			if broken.Load() {
				panic("metrics: label cardinality exceeded")
			}
		},
	}}, sideeffect.RecordKind)
	logger, logs := testlog.New()
	c := &completions{}
	cfg := config(fake, c)
	cfg.Logger = logger
	x, err := sideeffect.New(db, &cfg)
	require.NoError(t, err)
	in, _, err := x.Create(ctx, spec("1"))
	require.NoError(t, err)
	clock.Advance(time.Minute)
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, sideeffect.RunStats{Examined: 1, Errors: 1}, st)
	require.Contains(t, logs.String(), `level=ERROR msg="reconcile intent panicked" id=`+in.ID+` panic="metrics: label cardinality exceeded"`)
	require.Empty(t, fake.Charges(), "the reconciler asks Status first; its report panicked")

	broken.Store(false)
	paysOnceWhenDue(t, x, clock, db, fake)
}

// paysOnceWhenDue requires that order 1's intent, left by a pass that
// failed, is paid by the pass after its attempt's lease, and charged once
// in all.
func paysOnceWhenDue(t *testing.T, x *sideeffect.Executor, clock *kvtest.ManualClock, db *kv.DB, fake *providertest.Fake) {
	t.Helper()
	clock.Advance(10 * time.Minute) // past the attempt's lease
	st, err := x.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Succeeded)
	require.Equal(t, "paid:ch_0001", orderState(t, db, "1"))
	require.Len(t, fake.Charges(), 1)
}

// A Respond (Perform's completion) that panics is the call's error, not a
// panic through the caller: the transaction that would have stored the
// answer rolls back, the key is given back, and the log has the panic with
// Respond's stack. The provider acted, so the next attempt, once the
// attempt's lease has run out, asks Status and answers the one charge.
func TestPerformWithAPanickingRespond(t *testing.T) {
	t.Parallel()
	fake := providertest.New(providertest.Rates{}, 1)
	x, bb, logs, cfg := logged(t, fake, nil)
	l, err := ledger.New(bb.db, nil)
	require.NoError(t, err)
	var broken atomic.Bool
	broken.Store(true)
	answer := func(tx kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
		if broken.Load() {
			panic("respond: nil order")
		}
		return respond(tx, in)
	}

	_, err = x.Perform(ctx, l, payReq("1"), spec("1"), answer)
	require.ErrorContains(t, err, "Finish panicked: respond: nil order")
	require.Contains(t, logs.String(), `level=ERROR msg="intent completion panicked; its transaction rolled back"`)
	require.Contains(t, logs.String(), "hook=Finish")
	require.Contains(t, logs.String(), "TestPerformWithAPanickingRespond", "the stack names Respond")
	require.Len(t, fake.Charges(), 1)
	_, err = l.Get(ctx, payReq("1").Scope, payReq("1").Key)
	require.ErrorIs(t, err, ledger.ErrNotFound, "the key was given back: nothing stored")

	broken.Store(false)
	bb.clock.Advance(2 * cfg.Lease)
	res, err := x.Perform(ctx, l, payReq("1"), spec("1"), answer)
	require.NoError(t, err)
	require.Equal(t, `{"status":"paid","charge_id":"ch_0001"}`, string(res.Response.Body))
	require.Len(t, fake.Charges(), 1)
	require.Equal(t, "paid:ch_0001", orderState(t, bb.db, "1"))
}

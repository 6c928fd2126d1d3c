package observe_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inbox"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/retention"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// recorder keeps every event, as a test's observer.
type recorder struct {
	mu       sync.Mutex
	requests []observe.Request
	commits  []observe.Commit
	sweeps   []observe.Sweep
	intents  []observe.Intent
	calls    []observe.ProviderCall
	publish  []observe.Publish
	lags     []observe.OutboxLag
	messages []observe.Message
	spans    []string
	spanErrs []error // as each span ended, in order
}

func (r *recorder) observer() *observe.Observer {
	lock := func(f func()) { r.mu.Lock(); f(); r.mu.Unlock() }
	return &observe.Observer{
		Request:      func(_ context.Context, e observe.Request) { lock(func() { r.requests = append(r.requests, e) }) },
		Commit:       func(e observe.Commit) { lock(func() { r.commits = append(r.commits, e) }) },
		Sweep:        func(e observe.Sweep) { lock(func() { r.sweeps = append(r.sweeps, e) }) },
		Intent:       func(_ context.Context, e observe.Intent) { lock(func() { r.intents = append(r.intents, e) }) },
		ProviderCall: func(_ context.Context, e observe.ProviderCall) { lock(func() { r.calls = append(r.calls, e) }) },
		Publish:      func(_ context.Context, e observe.Publish) { lock(func() { r.publish = append(r.publish, e) }) },
		OutboxLag:    func(e observe.OutboxLag) { lock(func() { r.lags = append(r.lags, e) }) },
		Message:      func(_ context.Context, e observe.Message) { lock(func() { r.messages = append(r.messages, e) }) },
		Span: func(ctx context.Context, name string, _ ...observe.Attr) (context.Context, func(error)) {
			lock(func() { r.spans = append(r.spans, name) })
			return ctx, func(err error) { lock(func() { r.spanErrs = append(r.spanErrs, err) }) }
		},
	}
}

// Every package reports to the observer set on the database: a scripted
// scenario (3 new requests, 2 replays, 1 mismatch, one intent parked, an
// event published and one quarantined, a duplicate delivery, a sweep) is
// seen as it happened.
func TestEveryPackageReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	clock := kvtest.NewManualClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	db := kvtest.Open(t, &kv.Options{Observer: rec.observer(), Clock: clock})
	require.Same(t, db.Observer(), db.Observer())

	l, err := ledger.New(db, &ledger.Config{Retention: time.Hour})
	require.NoError(t, err)
	do := func(key string, fp byte) error {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{fp}},
			func(kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Body: []byte(`{"id":"x"}`)}, nil
			})
		return err
	}
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, do(k, 1))
	}
	require.NoError(t, do("a", 1))
	require.NoError(t, do("b", 1))
	require.ErrorIs(t, do("c", 2), ledger.ErrMismatch)

	fake := providertest.New(providertest.Rates{}, 1)
	fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: fake}}, MaxAttempts: 1})
	require.NoError(t, err)
	in, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Scope: "acme", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)

	ob := outbox.New(db)
	for _, id := range []string{"ev-ok", "ev-bad"} {
		_, _, err := ob.Add(ctx, outbox.Event{ID: id, Topic: "order.paid"})
		require.NoError(t, err)
	}
	relay, err := outbox.NewRelay(ob, &outbox.RelayConfig{MaxAttempts: 1, Publisher: outbox.PublishFunc(func(_ context.Context, e outbox.Event) error {
		if e.ID == "ev-bad" {
			return errors.New("broker says no")
		}
		return nil
	})})
	require.NoError(t, err)
	_, err = relay.RunOnce(ctx)
	require.NoError(t, err)

	ib, err := inbox.New(db, nil)
	require.NoError(t, err)
	for range 2 {
		_, err := ib.Handle(ctx, "billing", "msg-1", func(kv.Tx) error { return nil })
		require.NoError(t, err)
	}
	clock.Advance(2 * time.Hour)
	_, err = retention.Sweep(ctx, db, nil, ledger.RecordKind)
	require.NoError(t, err)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	outcomes := map[observe.Outcome]int{}
	for _, r := range rec.requests {
		require.Equal(t, "do", r.Call)
		require.Equal(t, "acme", r.Tenant)
		outcomes[r.Outcome]++
		if r.Outcome == observe.OutcomeNew {
			require.Positive(t, r.RecordBytes)
		} else {
			require.Zero(t, r.RecordBytes)
		}
	}
	require.Equal(t, map[observe.Outcome]int{observe.OutcomeNew: 3, observe.OutcomeReplay: 2, observe.OutcomeMismatch: 1}, outcomes)
	require.Equal(t, 6, count(rec.spans, "oncekv.ledger.do"))
	require.Equal(t, []observe.Intent{{Kind: "charge", State: "pending"}, {Kind: "charge", State: "needs_attention"}}, rec.intents)
	require.Len(t, rec.calls, 1)
	require.Equal(t, observe.ProviderCall{Kind: "charge", Op: "do", Outcome: "error"}, withoutDuration(rec.calls[0]))
	require.Equal(t, 1, count(rec.spans, "oncekv.provider.do"))
	require.Len(t, rec.publish, 2)
	require.Equal(t, observe.Publish{Topic: "order.paid"}, withoutPublishDuration(rec.publish[0]))
	require.Equal(t, observe.Publish{Topic: "order.paid", Err: true, Quarantined: true}, rec.publish[1])
	require.Equal(t, []observe.OutboxLag{{Quarantined: 1}}, rec.lags)
	require.Equal(t, []observe.Message{{Consumer: "billing"}, {Consumer: "billing", Duplicate: true}}, rec.messages)
	require.Len(t, rec.sweeps, 1)
	require.Equal(t, "idempotency", rec.sweeps[0].Kind)
	require.Equal(t, 3, rec.sweeps[0].Deleted)
	var calls int
	for _, c := range rec.commits {
		require.False(t, c.Err)
		require.Positive(t, c.Duration)
		require.Positive(t, c.Write, "bbolt's write time")
		calls += c.Calls
	}
	require.GreaterOrEqual(t, calls, 3+2+1, "every write went through a reported commit")
}

func count(names []string, name string) int {
	n := 0
	for _, s := range names {
		if s == name {
			n++
		}
	}
	return n
}

func withoutDuration(c observe.ProviderCall) observe.ProviderCall { c.Duration = 0; return c }

func withoutPublishDuration(p observe.Publish) observe.Publish { p.Duration = 0; return p }

// An unset observer costs a nil check: Do allocates no more with it unset
// than the ledger did before (measured: bench BenchmarkObserver).
func TestNilObserverIsSafe(t *testing.T) {
	t.Parallel()
	var o *observe.Observer
	ctx, end := o.Start(context.Background(), "x")
	end(nil)
	require.NotNil(t, ctx)
	require.False(t, o.Tracing())
	require.False(t, (&observe.Observer{}).Tracing())
}

// The two-phase calls report as Do does: a Claim that claims, replays, is
// refused (in progress, mismatch) or takes an abandoned claim over; a
// Complete that stores (with the record's size) or finds its claim taken
// over (lease_lost: its lease was too short for the work). Each has its
// span, ended without an error for a refusal, which is an answer.
func TestTwoPhaseCallsReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &recorder{}
	clock := kvtest.NewManualClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	db := kvtest.Open(t, &kv.Options{Observer: rec.observer(), Clock: clock})
	l, err := ledger.New(db, &ledger.Config{Lease: time.Minute})
	require.NoError(t, err)
	req := func(key string, fp byte) ledger.Request {
		return ledger.Request{Scope: "acme|POST /v1/orders/pay", Key: key, Fingerprint: ledger.Fingerprint{fp}}
	}
	resp := ledger.Response{Status: 200, Body: []byte(`{"paid":true}`)}

	out, err := l.Claim(ctx, req("a", 1))
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("a", 1))
	require.ErrorIs(t, err, ledger.ErrInProgress)
	_, err = l.Complete(ctx, out.Claim, resp, nil)
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("a", 1))
	require.NoError(t, err)
	_, err = l.Claim(ctx, req("a", 2))
	require.ErrorIs(t, err, ledger.ErrMismatch)

	first, err := l.Claim(ctx, req("b", 1))
	require.NoError(t, err)
	clock.Advance(2 * time.Minute)
	_, err = l.Claim(ctx, req("b", 1))
	require.NoError(t, err)
	_, err = l.Complete(ctx, first.Claim, resp, nil)
	require.ErrorIs(t, err, ledger.ErrLeaseLost)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	type seen struct {
		Call    string
		Outcome observe.Outcome
		Stored  bool
	}
	var got []seen
	for _, r := range rec.requests {
		require.Equal(t, "acme", r.Tenant)
		got = append(got, seen{r.Call, r.Outcome, r.RecordBytes > 0})
	}
	require.Equal(t, []seen{
		{"claim", observe.OutcomeNew, false},
		{"claim", observe.OutcomeInProgress, false},
		{"complete", observe.OutcomeNew, true},
		{"claim", observe.OutcomeReplay, false},
		{"claim", observe.OutcomeMismatch, false},
		{"claim", observe.OutcomeNew, false},
		{"claim", observe.OutcomeTakeover, false},
		{"complete", observe.OutcomeLeaseLost, false},
	}, got)
	require.Equal(t, 6, count(rec.spans, "oncekv.ledger.claim"))
	require.Equal(t, 2, count(rec.spans, "oncekv.ledger.complete"))
	require.Equal(t, []error{nil, nil, nil, nil, nil, nil, nil, nil}, rec.spanErrs, "refusals are answers, not failed calls")
}

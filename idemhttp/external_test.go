package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/internal/testlog"
	"github.com/oncekv/oncekv/internal/testwait"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

type external struct {
	db    *kv.DB
	clock *kvtest.ManualClock
	l     *ledger.Ledger
	x     *sideeffect.Executor
	mw    *idemhttp.Middleware
	fake  *providertest.Fake
	srv   *httptest.Server
	wrote atomic.Bool // what the last Perform returned: true when it wrote a stored answer
	// status is the status the pay handler's Respond stores (200 unless
	// a test sets it; respondPanics makes Respond panic).
	status atomic.Int32
	// pad is how many bytes the Respond adds to its body (0 unless a test
	// sets it).
	pad atomic.Int64
}

// respondPanics, as external.status, makes the pay handler's Respond panic;
// respondWrites makes it write an audit row with a transaction of its own,
// started with the request's context.
const (
	respondPanics = -1
	respondWrites = -2
)

// retryAfterTheLease mends Respond (status 200) and sends key's payment of
// order A again past the intent's lease: it answers the one charge the
// provider made.
func (e *external) retryAfterTheLease(t *testing.T, key string) {
	t.Helper()
	e.status.Store(200)
	e.clock.Advance(2 * sideeffect.DefaultLease)
	r := postPay(t, e.srv, "/v1/orders/A/pay", key)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Len(t, e.fake.Charges(), 1)
}

// audit writes an audit row for id in a transaction of its own.
func audit(ctx context.Context, db *kv.DB, id string) error {
	return db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("audit"))
		if err != nil {
			return err
		}
		return b.Put([]byte(id), []byte("paid"))
	})
}

// setupExternal serves POST /v1/orders/{id}/pay through WrapExternal: the
// handler performs a "charge" intent per order against a fake provider.
func setupExternal(t *testing.T, mutate func(*idemhttp.Config)) *external {
	t.Helper()
	e := &external{clock: kvtest.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)), fake: providertest.New(providertest.Rates{}, 1)}
	e.status.Store(200)
	e.db = kvtest.Open(t, &kv.Options{NoSync: true, Clock: e.clock}, ledger.RecordKind, sideeffect.RecordKind)
	var err error
	e.l, err = ledger.New(e.db, &ledger.Config{Lease: time.Minute})
	require.NoError(t, err)
	e.x, err = sideeffect.New(e.db, &sideeffect.Config{
		Handlers:    map[string]sideeffect.Handler{"charge": {Provider: e.fake}},
		MaxAttempts: 3,
		Backoff:     sideeffect.Backoff{Base: 2 * time.Second, Cap: time.Minute, Rand: func() float64 { return 0.5 }},
	})
	require.NoError(t, err)
	cfg := idemhttp.Config{Ledger: e.l, Executor: e.x, Tenant: func(*http.Request) (string, error) { return "acme", nil }}
	if mutate != nil {
		mutate(&cfg)
	}
	e.mw, err = idemhttp.New(&cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{id}/pay", e.mw.WrapExternal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if e.status.Load() == respondWrites {
			// Outside Perform the handler runs in no transaction: its
			// writes with the request's context are its own.
			if err := audit(r.Context(), e.db, id+"-before"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		e.wrote.Store(idemhttp.Perform(w, r, sideeffect.Spec{Kind: "charge", Subject: "order/" + id, Scope: "acme", Key: id, Purpose: "charge"},
			func(_ kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
				switch e.status.Load() {
				case respondPanics:
					panic("respond: nil order")
				case respondWrites:
					if err := audit(r.Context(), e.db, id); err != nil {
						return ledger.Response{}, err
					}
				}
				body := fmt.Appendf(nil, "%s %s", in.State, in.Result)
				return ledger.Response{Status: int(e.status.Load()), Body: append(body, make([]byte, e.pad.Load())...)}, nil
			}))
	})))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

// Client retries during a provider outage once parked the payment and then
// answered a bare 500 to every later pay (issue 13, item 3). During the
// intent's backoff they get 503 with Retry-After and spend nothing; a parked
// intent gets a 409 problem naming its state.
func TestExternalRetriesDuringBackoffAndParkedIntent(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	e.fake.Script = func(string, sideeffect.Call) providertest.Fault { return providertest.FailBeforeCharge }

	first := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 502, first.status, first.body)
	require.False(t, e.wrote.Load(), "Perform stored nothing")
	require.Equal(t, idemhttp.ProblemOutcomePending, problemType(t, first))
	require.Equal(t, "1", first.header.Get("Retry-After"), "the first backoff is 1s (half of the 2s ceiling)")

	for range 8 {
		r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
		require.Equal(t, 503, r.status, r.body)
		require.Equal(t, idemhttp.ProblemBackoff, problemType(t, r))
		require.Equal(t, "1", r.header.Get("Retry-After"))
	}
	id := sideeffect.DownstreamKey("acme", "A", "charge")
	require.Equal(t, []string{"do:failed"}, e.fake.Ops(id), "no attempt was spent")

	// Past the backoff each retry is one real attempt; the third parks it.
	for range 2 {
		e.clock.Advance(time.Hour)
		require.Equal(t, 502, postPay(t, e.srv, "/v1/orders/A/pay", "K").status)
	}
	in, err := e.x.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, sideeffect.StateNeedsAttention, in.State)
	for _, key := range []string{"K", "new-key"} {
		r := postPay(t, e.srv, "/v1/orders/A/pay", key)
		require.Equal(t, 409, r.status, r.body)
		require.Equal(t, idemhttp.ProblemNeedsAttention, problemType(t, r))
		require.Contains(t, r.body, "needs_attention")
		require.Empty(t, r.header.Get("Retry-After"), "no client retry helps")
	}

	e.fake.Script = nil
	_, err = e.x.Requeue(ctx, id)
	require.NoError(t, err)
	r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.True(t, e.wrote.Load(), "Perform wrote the stored answer")
	require.Len(t, e.fake.Charges(), 1)
}

// Config.Wait was ignored on WrapExternal routes and by Perform: the
// duplicate of a payment in progress got 409 at once (issue 13, item 16).
// It now waits for the first attempt and gets its answer.
func TestExternalDuplicateWaitsForTheFirstAttempt(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, func(c *idemhttp.Config) { c.Wait = 30 * time.Second })
	entered, release := make(chan struct{}), make(chan struct{})
	e.fake.Script = func(op string, _ sideeffect.Call) providertest.Fault {
		if op == "do" {
			close(entered)
			<-release // the provider is slow: the first attempt holds the key
		}
		return providertest.None
	}
	first := make(chan reply, 1)
	go func() { first <- postPay(t, e.srv, "/v1/orders/A/pay", "K") }()
	testwait.Receive(t, entered, "the provider called")
	second := make(chan reply, 1)
	go func() { second <- postPay(t, e.srv, "/v1/orders/A/pay", "K") }()
	waitFor(t, func() bool { return e.l.Waited() > 0 })
	close(release)
	a, b := testwait.Receive(t, first, "the first answer"), testwait.Receive(t, second, "the duplicate's answer")
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, 200, b.status, "the duplicate waited instead of answering 409: %s", b.body)
	require.Equal(t, a.body, b.body)
	require.Equal(t, "true", b.header.Get(idemhttp.HeaderReplayed))
	require.Len(t, e.fake.Charges(), 1)
}

// A Respond that leaves the status 0 (the ledger allows it, for responses
// that are not HTTP) made Perform call WriteHeader(0), which net/http
// refuses with a panic: the client lost the connection while the charge
// and its answer were stored, and the retry replayed a 200. Both now get
// the 200.
func TestExternalResponseWithoutStatusIsA200(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	e.status.Store(0)
	for i, want := range []string{"", "true"} {
		r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
		require.Equal(t, 200, r.status, "request %d: %s", i, r.body)
		require.Equal(t, "succeeded ch_0001", r.body)
		require.Equal(t, want, r.header.Get(idemhttp.HeaderReplayed))
	}
	require.Len(t, e.fake.Charges(), 1)
}

// waitFor polls a condition on state (never a fixed sleep), for at most 10s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition never held")
}

// A Respond that answers an informational status (a 103) had it stored:
// the client and every retry got the 103 as an interim response and then
// a 200 net/http made up. The ledger refuses it now: the client gets a 500
// problem, nothing is stored, and once Respond is mended a retry finishes
// from the provider's word without charging again.
func TestExternalInformationalResponseIsNotStored(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	e.status.Store(103)
	r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 500, r.status, r.body)
	require.Contains(t, r.header.Get("Content-Type"), "application/problem+json")
	require.Contains(t, r.body, "a status that cannot be stored", "the problem says what went wrong")
	require.Len(t, e.fake.Charges(), 1, "the provider was called once")
	const scope = "acme|POST /v1/orders/{id}/pay"
	_, err := e.l.Get(t.Context(), scope, "K")
	require.ErrorIs(t, err, ledger.ErrNotFound, "no record of the 103")

	e.status.Store(200)
	e.clock.Advance(2 * time.Minute) // past the attempt's lease
	r = postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Len(t, e.fake.Charges(), 1, "the retry asked the provider, it did not charge again")
	stored, err := e.l.Get(t.Context(), scope, "K")
	require.NoError(t, err)
	require.Equal(t, 200, stored.ResponseStatus)
}

// A Respond whose answer is larger than the ledger stores gets a 500
// problem that says so (it was a bare "Internal error"); nothing is
// stored, and a retry with a smaller answer finishes from the provider's
// word without charging again.
func TestExternalResponseTooLargeIsAProblem(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	e.pad.Store(ledger.DefaultMaxResponseBytes)
	r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 500, r.status)
	require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
	require.Contains(t, r.body, "Response too large to store")
	require.Contains(t, r.body, fmt.Sprintf("exceeds %d bytes", ledger.DefaultMaxResponseBytes))
	_, err := e.l.Get(t.Context(), "acme|POST /v1/orders/{id}/pay", "K")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	e.pad.Store(0)
	e.clock.Advance(2 * time.Minute) // past the attempt's lease
	r = postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Len(t, e.fake.Charges(), 1)
}

// A key reused to pay another order on an external route is a mismatch
// (422) answered before the handler runs: the provider is not called for
// the other order, no intent is recorded for it, and the first order's
// answer is not replayed. The first order's retry is still a replay, and
// the other order pays under a key of its own.
func TestExternalKeyReusedOnAnotherResourceIsRejected(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	a := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, a.status, a.body)
	require.Equal(t, "succeeded ch_0001", a.body)

	b := postPay(t, e.srv, "/v1/orders/B/pay", "K")
	require.Equal(t, 422, b.status, b.body)
	require.Equal(t, idemhttp.ProblemKeyReused, problemType(t, b))
	require.Empty(t, b.header.Get(idemhttp.HeaderReplayed))
	require.NotContains(t, b.body, "ch_0001", "the first order's answer is not handed out")
	require.True(t, e.wrote.Load(), "the handler did not run for B: what Perform last returned is still A's")
	require.Len(t, e.fake.Charges(), 1, "order B was not charged")
	require.Empty(t, e.fake.Ops(sideeffect.DownstreamKey("acme", "B", "charge")))
	_, err := e.x.Get(ctx, sideeffect.DownstreamKey("acme", "A", "charge"))
	require.NoError(t, err, "order A's intent")
	_, err = e.x.Get(ctx, sideeffect.DownstreamKey("acme", "B", "charge"))
	require.ErrorIs(t, err, sideeffect.ErrNotFound, "no intent for order B")

	again := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, "true", again.header.Get(idemhttp.HeaderReplayed))
	require.Equal(t, a.body, again.body)

	own := postPay(t, e.srv, "/v1/orders/B/pay", "K2")
	require.Equal(t, 200, own.status, own.body)
	require.Equal(t, "succeeded ch_0002", own.body)
	require.Len(t, e.fake.Charges(), 2)
}

// Perform outside a handler wrapped by WrapExternal (here: not wrapped
// at all, and wrapped by Wrap) calls nothing and answers a 500 problem
// that says how to use it.
func TestPerformOutsideWrapExternalIsAProblem(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	var performed atomic.Int32
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if idemhttp.Perform(w, r, sideeffect.Spec{Kind: "charge", Subject: "order/X", Scope: "acme", Key: "X", Purpose: "charge"},
			func(kv.Tx, *sideeffect.Intent) (ledger.Response, error) { return ledger.Response{Status: 200}, nil }) {
			performed.Add(1)
		}
	})
	for name, h := range map[string]http.Handler{"unwrapped": pay, "Wrap": e.mw.Wrap(pay)} {
		srv := httptest.NewServer(h)
		r := postPay(t, srv, "/", "P-"+name)
		srv.Close()
		require.Equal(t, 500, r.status, name)
		require.Equal(t, idemhttp.ProblemInternal, problemType(t, r), name)
		require.Contains(t, r.body, "idemhttp.Perform needs a handler wrapped by WrapExternal", name)
	}
	require.Zero(t, performed.Load())
	require.Empty(t, e.fake.Charges())
	_, err := e.x.Get(ctx, sideeffect.DownstreamKey("acme", "X", "charge"))
	require.ErrorIs(t, err, sideeffect.ErrNotFound)
}

// A Respond whose status cannot be stored (a service's bug) is a 500
// problem that says so, and the provider is charged once. The claim stays
// until its lease ends (a retry meanwhile is told the request is in
// progress); each later attempt takes it over, finds the payment done and
// answers the same 500; once the service answers a storable status, the
// retry gets the one charge's answer, stored.
func TestExternalAnswerThatCannotBeStoredChargesOnce(t *testing.T) {
	t.Parallel()
	e := setupExternal(t, nil)
	e.status.Store(1000)
	cannot := func() {
		t.Helper()
		r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
		require.Equal(t, 500, r.status, r.body)
		require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
		require.Contains(t, r.body, "a status that cannot be stored (a stored answer's status is 200-999); nothing was stored")
		require.False(t, e.wrote.Load())
	}
	cannot()
	busy := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 409, busy.status, busy.body)
	require.Equal(t, idemhttp.ProblemInProgress, problemType(t, busy))
	require.NotEmpty(t, busy.header.Get("Retry-After"))
	for range 2 {
		e.clock.Advance(2 * time.Minute) // past the claim's lease
		cannot()
	}
	require.Len(t, e.fake.Charges(), 1)

	e.status.Store(200)
	e.clock.Advance(2 * time.Minute)
	r := postPay(t, e.srv, "/v1/orders/A/pay", "K")
	require.Equal(t, 200, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Equal(t, "true", postPay(t, e.srv, "/v1/orders/A/pay", "K").header.Get(idemhttp.HeaderReplayed))
	require.Len(t, e.fake.Charges(), 1)
}

// heldProvider holds the Do calls it is told to (numbered from 1) until
// their channel closes, telling entered which call it holds.
type heldProvider struct {
	sideeffect.Provider
	calls   atomic.Int32
	hold    map[int32]chan struct{}
	entered chan int32
}

func (h *heldProvider) Do(ctx context.Context, c sideeffect.Call) (sideeffect.Report, error) {
	n := h.calls.Add(1)
	if ch, ok := h.hold[n]; ok {
		h.entered <- n
		<-ch
	}
	return h.Provider.Do(ctx, c)
}

// A payment whose provider call outlives its intent's lease (a provider
// that ignores its context) is taken over by the client's retry, which
// finishes it; the first attempt's own result is discarded. Its client got
// a 500 for a payment that went through. It now gets the retry's stored
// answer as a replay, or, while the retry is still running, 409 with
// Retry-After; the provider charges once, and the service's log warns.
// Past the claim's lease alone nothing is taken over: the intent's lease
// holds the request, the retry gets 409 and the first attempt answers.
func TestOvertakenPaymentAnswersWhatTheRetryStored(t *testing.T) {
	t.Parallel()
	// setup holds the Do calls numbered hold, with the intent's lease
	// (0: the default, a minute, as the claim's).
	setup := func(lease time.Duration, hold ...int32) (*external, *heldProvider, *testlog.Buffer) {
		h := &heldProvider{Provider: providertest.New(providertest.Rates{}, 1), hold: map[int32]chan struct{}{}, entered: make(chan int32, 2)}
		for _, n := range hold {
			h.hold[n] = make(chan struct{})
		}
		logger, logs := testlog.New()
		e := setupExternal(t, func(c *idemhttp.Config) {
			x, err := sideeffect.New(c.Ledger.DB(), &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: h}}, MaxAttempts: 3, Lease: lease, Logger: logger})
			require.NoError(t, err)
			c.Executor = x
			c.Logger = logger
		})
		e.fake = h.Provider.(*providertest.Fake)
		return e, h, logs
	}
	pay := func(e *external) chan reply {
		out := make(chan reply, 1)
		go func() { out <- postPay(t, e.srv, "/v1/orders/A/pay", "k-slow") }()
		return out
	}
	overtaken := `level=WARN msg="intent attempt overtaken: its provider call outlived the intent's lease and a retry took it over" scope="acme|POST /v1/orders/{id}/pay" key=k-slow`

	// Past the claim's lease (a minute) but not the intent's (five): the
	// retry is refused, the first attempt finishes and answers itself.
	e, h, logs := setup(5*time.Minute, 1)
	first := pay(e)
	require.EqualValues(t, 1, testwait.Receive(t, h.entered, "the provider's first call"))
	e.clock.Advance(90 * time.Second)
	retry := postPay(t, e.srv, "/v1/orders/A/pay", "k-slow")
	require.Equal(t, http.StatusConflict, retry.status, retry.body)
	require.Equal(t, idemhttp.ProblemInProgress, problemType(t, retry))
	close(h.hold[1])
	r := testwait.Receive(t, first, "the first attempt's answer")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Empty(t, r.header.Get(idemhttp.HeaderReplayed), "its own answer")
	require.NotContains(t, logs.String(), "overtaken")

	// The retry finishes first: the first attempt answers its answer.
	e, h, logs = setup(0, 1)
	first = pay(e)
	require.EqualValues(t, 1, testwait.Receive(t, h.entered, "the provider's first call"))
	e.clock.Advance(2 * time.Minute) // past both one-minute leases
	retry = postPay(t, e.srv, "/v1/orders/A/pay", "k-slow")
	require.Equal(t, http.StatusOK, retry.status, retry.body)
	require.Equal(t, "succeeded ch_0001", retry.body)
	require.Empty(t, retry.header.Get(idemhttp.HeaderReplayed))
	close(h.hold[1])
	r = testwait.Receive(t, first, "the first attempt's answer")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed), "the answer the retry stored")
	require.Len(t, e.fake.Charges(), 1)
	require.Contains(t, logs.String(), overtaken)
	require.NotContains(t, logs.String(), "level=ERROR")

	// The first attempt finishes while the retry still runs: 409, then the
	// retry's answer for the client's next retry.
	e, h, logs = setup(0, 1, 2)
	first = pay(e)
	require.EqualValues(t, 1, testwait.Receive(t, h.entered, "the provider's first call"))
	e.clock.Advance(2 * time.Minute)
	second := pay(e)
	require.EqualValues(t, 2, testwait.Receive(t, h.entered, "the provider's second call"))
	close(h.hold[1])
	r = testwait.Receive(t, first, "the first attempt's answer")
	require.Equal(t, http.StatusConflict, r.status, r.body)
	require.Equal(t, idemhttp.ProblemInProgress, problemType(t, r))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	close(h.hold[2])
	r = testwait.Receive(t, second, "the retry's answer")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body)
	r = postPay(t, e.srv, "/v1/orders/A/pay", "k-slow")
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed))
	require.Len(t, e.fake.Charges(), 1)
	require.Contains(t, logs.String(), overtaken)
	require.NotContains(t, logs.String(), "level=ERROR")
}

// A Respond that panics (the service's bug, after the provider acted) is a
// 500 problem, as an in-transaction handler's panic is, not a broken
// connection, and logged; nothing is stored. Once Respond is mended, the retry after the intent's lease
// answers the one charge.
func TestExternalRespondThatPanicsIsAProblem(t *testing.T) {
	t.Parallel()
	logger, logs := testlog.New()
	e := setupExternal(t, func(c *idemhttp.Config) { c.Logger = logger })
	e.status.Store(respondPanics)
	r := postPay(t, e.srv, "/v1/orders/A/pay", "k-respond")
	require.Equal(t, http.StatusInternalServerError, r.status, r.body)
	require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
	require.Contains(t, logs.String(), `level=ERROR msg="idempotent request failed" error="Finish panicked: respond: nil order"`,
		"the middleware's log; the executor's (sideeffect.Config.Logger) has the stack")
	require.Len(t, e.fake.Charges(), 1)

	e.retryAfterTheLease(t, "k-respond")
}

// A Respond that writes with a transaction of its own, started with the
// request's context, waited for ever for the writer its own finishing
// transaction held, and every write of the service with it. Respond runs
// with the handler's context marked as inside that transaction: the write
// fails at once with kv.ErrNestedTx, the request gets a 500 problem and
// nothing of it is stored; the provider charged once, and a retry (Respond
// mended) answers the charge.
func TestExternalRespondThatWritesIsRefused(t *testing.T) {
	t.Parallel()
	logger, logs := testlog.New()
	e := setupExternal(t, func(c *idemhttp.Config) { c.Logger = logger })
	e.srv.Client().Timeout = 30 * time.Second
	e.status.Store(respondWrites)
	r, err := tryPost(t, e.srv, "/v1/orders/A/pay", "k-audit", `{}`)
	require.NoError(t, err, "answered, not hung")
	require.Equal(t, http.StatusInternalServerError, r.status, r.body)
	require.Contains(t, logs.String(), "write transaction started inside a write transaction")
	require.NoError(t, e.db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("audit"))
		require.NotNil(t, b)
		require.Equal(t, []byte("paid"), b.Get([]byte("A-before")), "the handler's write before Perform is its own")
		require.Nil(t, b.Get([]byte("A")), "the nested write stored nothing")
		return nil
	}))
	require.Len(t, e.fake.Charges(), 1)

	e.retryAfterTheLease(t, "k-audit")
}

// An external route's handler that panics is answered as an
// in-transaction one's is: logged with its stack, and, when it had written
// nothing, a 500 problem (net/http would have broken the connection). A
// panic after Perform's answer leaves that answer whole. Neither calls the
// provider twice.
func TestExternalHandlerPanicIsAProblem(t *testing.T) {
	t.Parallel()
	logger, logs := testlog.New()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, ledger.RecordKind, sideeffect.RecordKind)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	fake := providertest.New(providertest.Rates{}, 1)
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: fake}}})
	require.NoError(t, err)
	mw, err := idemhttp.New(&idemhttp.Config{Ledger: l, Executor: x, Logger: logger, Tenant: func(*http.Request) (string, error) { return "acme", nil }})
	require.NoError(t, err)
	var when atomic.Value // "before" or "after" Perform; "" for none
	when.Store("before")
	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders/{id}/pay", mw.WrapExternal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if when.Load() == "before" {
			panic("validate: nil amount")
		}
		idemhttp.Perform(w, r, sideeffect.Spec{Kind: "charge", Subject: "order/" + r.PathValue("id"), Scope: "acme", Key: r.PathValue("id"), Purpose: "charge"},
			func(_ kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
				return ledger.Response{Status: 200, Body: fmt.Appendf(nil, "%s %s", in.State, in.Result)}, nil
			})
		if when.Load() == "after" {
			panic("metrics: nil counter")
		}
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	r := postPay(t, srv, "/v1/orders/A/pay", "k-A")
	require.Equal(t, http.StatusInternalServerError, r.status, r.body)
	require.Equal(t, idemhttp.ProblemInternal, problemType(t, r))
	require.Contains(t, logs.String(), `level=ERROR msg="handler panicked" scope="acme|POST /v1/orders/{id}/pay" key=k-A panic="validate: nil amount"`)
	require.Contains(t, logs.String(), "TestExternalHandlerPanicIsAProblem", "the stack names the handler")
	require.Contains(t, logs.String(), "outcome=not_stored", "the request's event")
	require.Empty(t, fake.Log(), "no provider was called")

	when.Store("after")
	r = postPay(t, srv, "/v1/orders/A/pay", "k-A")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Equal(t, "succeeded ch_0001", r.body, "Perform's answer, whole")
	require.Contains(t, logs.String(), `panic="metrics: nil counter"`)

	when.Store("")
	r = postPay(t, srv, "/v1/orders/A/pay", "k-A")
	require.Equal(t, "succeeded ch_0001", r.body)
	require.Equal(t, "true", r.header.Get(idemhttp.HeaderReplayed))
	require.Len(t, fake.Charges(), 1)
}

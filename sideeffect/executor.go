package sideeffect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
)

// Defaults used when the corresponding Config field is zero.
const (
	// DefaultGrace is how long a new intent is left to the code that created
	// it before the reconciler may take it over.
	DefaultGrace = 30 * time.Second
	// DefaultLease is how long an attempt holds an intent.
	DefaultLease = time.Minute
	// DefaultCallTimeout bounds one provider call.
	DefaultCallTimeout = 30 * time.Second
	// DefaultMaxAttempts is how many attempts an intent gets before it is
	// parked as needs_attention.
	DefaultMaxAttempts = 8
	// DefaultPollInterval is the reconciler's fallback poll.
	DefaultPollInterval = 30 * time.Second
)

// Handler knows how to perform one kind of intent and what to write when
// it finishes.
type Handler struct {
	// Provider performs the call and reports status.
	Provider Provider
	// OnSucceeded runs in the transaction that marks the intent succeeded
	// ("order paid", an outbox event). It may run more than once (group
	// commit) and must write only through tx. May be nil. An error, or a
	// panic (recovered and logged with its stack), rolls the transaction
	// back: the intent is tried again when due.
	OnSucceeded func(tx kv.Tx, in *Intent) error
	// OnFailed runs in the transaction that marks the intent failed, as
	// OnSucceeded does. May be nil.
	OnFailed func(tx kv.Tx, in *Intent) error
}

// Config configures an Executor.
type Config struct {
	// Handlers maps an intent Kind to its Handler. Required.
	Handlers map[string]Handler
	// Grace: see DefaultGrace.
	Grace time.Duration
	// Lease: see DefaultLease. Must exceed CallTimeout.
	Lease time.Duration
	// CallTimeout: see DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxAttempts: see DefaultMaxAttempts.
	MaxAttempts int
	// Backoff spaces attempts whose outcome was unknown. Zero fields mean 1s
	// base and 5m cap.
	Backoff Backoff
	// PollInterval is the reconciler's fallback when nothing wakes it.
	PollInterval time.Duration
	// Concurrency is how many intents the reconciler works on at once. 0 means 4.
	Concurrency int
	// Logger receives one line per finished attempt. nil discards.
	Logger *slog.Logger
	// FinishedRetention is how long a succeeded or failed intent is kept
	// before retention sweeps remove it. 0 means DefaultFinishedRetention;
	// negative keeps them forever. Parked (needs_attention) intents are
	// never removed.
	FinishedRetention time.Duration
	// FinishedRetentionFor, if set, overrides FinishedRetention per intent
	// kind (for example retention.Policy.Func); 0 falls back.
	FinishedRetentionFor func(kind string) time.Duration
}

// DefaultFinishedRetention is how long finished intents are kept.
const DefaultFinishedRetention = keyspace.DefaultFinishedIntents

func (x *Executor) finishedExpiry(kind string, t time.Time) time.Time {
	d := x.cfg.FinishedRetention
	if x.cfg.FinishedRetentionFor != nil {
		if r := x.cfg.FinishedRetentionFor(kind); r != 0 {
			d = r
		}
	}
	return keyspace.ExpiryAt(t, d)
}

func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.Grace == 0 {
		r.Grace = DefaultGrace
	}
	if r.Lease == 0 {
		r.Lease = DefaultLease
	}
	if r.CallTimeout == 0 {
		r.CallTimeout = DefaultCallTimeout
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.Backoff.Base == 0 {
		r.Backoff.Base = time.Second
	}
	if r.Backoff.Cap == 0 {
		r.Backoff.Cap = 5 * time.Minute
	}
	if r.PollInterval == 0 {
		r.PollInterval = DefaultPollInterval
	}
	if r.Concurrency == 0 {
		r.Concurrency = 4
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if r.FinishedRetention == 0 {
		r.FinishedRetention = DefaultFinishedRetention
	}
	return r
}

func (c *Config) validate() error {
	switch {
	case len(c.Handlers) == 0:
		return fmt.Errorf("%w: no Handlers", ErrInvalidConfig)
	case c.Grace < 0 || c.Lease < 0 || c.CallTimeout < 0 || c.PollInterval < 0 || c.Backoff.Base < 0 || c.Backoff.Cap < 0:
		return fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	case c.Concurrency < 0:
		// With no worker, a reconciler pass would wait for one until its
		// context ended.
		return fmt.Errorf("%w: Concurrency %d is negative", ErrInvalidConfig, c.Concurrency)
	case max(c.Grace, c.Lease, c.CallTimeout, c.PollInterval, c.Backoff.Base, c.Backoff.Cap, c.FinishedRetention) > keyspace.MaxRetention:
		return fmt.Errorf("%w: a duration exceeds 100 years; stored times would wrap round", ErrInvalidConfig)
	case c.Lease <= c.CallTimeout:
		return fmt.Errorf("%w: Lease %s must exceed CallTimeout %s, or a slow call could be taken over while it runs", ErrInvalidConfig, c.Lease, c.CallTimeout)
	case c.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts %d", ErrInvalidConfig, c.MaxAttempts)
	}
	for k, h := range c.Handlers {
		if h.Provider == nil {
			return fmt.Errorf("%w: handler %q has no Provider", ErrInvalidConfig, k)
		}
	}
	return nil
}

// Executor runs intents against their providers and finishes them. It is
// safe for concurrent use; create one per database.
type Executor struct {
	db   *kv.DB
	cfg  Config
	wake chan struct{}
	// held are the intents the reconciler could not attempt (no handler
	// for their kind, a record that does not decode): each is left alone
	// until its time, instead of being picked again at once, for ever.
	held holds
}

// New returns an Executor over db.
func New(db *kv.DB, cfg *Config) (*Executor, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Executor{db: db, cfg: c, wake: make(chan struct{}, 1)}, nil
}

// DB returns the executor's database.
func (x *Executor) DB() *kv.DB { return x.db }

// Config returns the executor's configuration with defaults applied.
func (x *Executor) Config() Config { return x.cfg }

// Wake nudges a running reconciler to look for due intents now.
func (x *Executor) Wake() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// Finish is extra work done in the transaction that finishes an intent, on
// top of the handler's completion: Perform uses it to complete the
// idempotency record with the response. An error, or a panic (recovered
// and logged with its stack), rolls the transaction back.
type Finish func(tx kv.Tx, in *Intent) error

// Execute runs one attempt of the intent: it takes the intent over (a new
// version and a lease, committed before the call), calls the provider
// outside any transaction, and records the outcome in one transaction with
// the handler's completion, only if the version is still its own.
//
// A first attempt calls Do. Any later attempt asks Status first and only
// calls Do (with the same downstream key) if the provider never received it,
// so a call whose response was lost is never repeated blindly.
//
// An intent that is already final is returned as is. An intent being
// executed by another goroutine returns ErrBusy; one parked for an operator,
// ErrNeedsAttention; a finish that lost its intent to a takeover,
// *StaleError.
func (x *Executor) Execute(ctx context.Context, id string) (*Intent, error) {
	return x.ExecuteWith(ctx, id, nil)
}

// ExecuteWith is Execute with extra work in the finishing transaction. When
// the intent is already final, finish runs at once in its own transaction.
func (x *Executor) ExecuteWith(ctx context.Context, id string, finish Finish) (*Intent, error) {
	return x.execute(ctx, id, false, finish)
}

type attempt struct {
	in        *Intent // as taken over
	askFirst  bool
	handler   Handler
	finalized bool // already final before this attempt
}

// takeOver claims the intent for one attempt, in its own transaction.
func (x *Executor) takeOver(ctx context.Context, id string, reconciling bool) (attempt, error) {
	var a attempt
	err := x.db.Batch(ctx, func(tx kv.Tx) error {
		var err error
		a, err = x.takeOverTx(tx, id, reconciling)
		if isRejected(err) || errors.Is(err, ErrUnknownKind) {
			return kv.Reject(err) // nothing was written
		}
		return err
	})
	return a, err
}

// takeOverTx claims the intent for one attempt inside tx: a new version, a
// lease, the attempt counted. A final intent is returned as is (finalized);
// a parked, busy or missing one returns ErrNeedsAttention, ErrBusy or
// ErrNotFound and writes nothing.
func (x *Executor) takeOverTx(tx kv.Tx, id string, reconciling bool) (attempt, error) {
	var a attempt
	in, err := loadIntent(tx, id)
	if err != nil {
		return a, err
	}
	if in == nil {
		return a, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	h, ok := x.cfg.Handlers[in.Kind]
	if !ok {
		return a, fmt.Errorf("%w: %q (intent %s)", ErrUnknownKind, in.Kind, id)
	}
	a.handler, a.in = h, in
	now := x.db.Clock().Now()
	switch {
	case in.State.Final():
		a.finalized = true
		return a, nil
	case in.State == StateNeedsAttention:
		return a, fmt.Errorf("%w: %s (%s %s): %s", ErrNeedsAttention, id, in.Kind, in.Subject, in.LastError)
	case now.Before(in.LeaseExpiresAt) && (in.Owner == x.db.Incarnation() || !x.db.Traits().SingleWriter):
		// Held by an attempt of this process, or (several writers) of
		// another replica; one process's other owners are dead ones.
		return a, fmt.Errorf("%w: %s", ErrBusy, id)
	}
	prev := *in
	a.askFirst = reconciling || in.Attempts > 0
	in.begin(now, x.db.Incarnation(), x.cfg.Lease)
	if err := storeIntent(tx, in, &prev); err != nil {
		return a, err
	}
	x.reportIntent(tx, in, &prev)
	ib, err := inflightNS.Create(tx)
	if err != nil {
		return a, err
	}
	return a, ib.Put([]byte(id), in.Owner[:])
}

func (x *Executor) execute(ctx context.Context, id string, reconciling bool, finish Finish) (*Intent, error) {
	a, err := x.takeOver(ctx, id, reconciling)
	if err != nil {
		return a.in, err
	}
	if !a.finalized {
		if reconciling {
			failpoint.Inject(failpoint.ReconcileTakeoverAfterCommit)
		} else {
			failpoint.Inject(failpoint.TakeoverAfterCommit)
		}
	}
	return x.run(ctx, a, finish)
}

// run carries out an attempt whose takeover has committed: an intent that
// was already final only gets finish, in its own transaction; otherwise the
// provider is called and the outcome recorded.
func (x *Executor) run(ctx context.Context, a attempt, finish Finish) (*Intent, error) {
	if a.finalized {
		var err error
		if finish != nil {
			err = x.db.Batch(ctx, func(tx kv.Tx) error { return x.completion("Finish", finish, tx, a.in) })
		}
		return a.in, err
	}
	if r := a.in.Resolution; r != nil {
		st := Failed
		if r.State == StateSucceeded {
			st = Succeeded
		}
		return x.record(ctx, a, Report{State: st, Result: r.Result, Reason: r.Reason}, finish)
	}
	return x.record(ctx, a, x.call(ctx, a), finish)
}

// call asks the provider, outside any transaction.
func (x *Executor) call(ctx context.Context, a attempt) Report {
	in := a.in
	c := Call{IntentID: in.ID, Kind: in.Kind, Subject: in.Subject, DownstreamKey: in.DownstreamKey, Payload: in.Payload, Attempt: in.Attempts}
	if a.askFirst {
		st, err := x.ask(ctx, "status", c, a.handler.Provider.Status)
		switch {
		case err != nil:
			return Report{State: Unknown, Reason: "status: " + err.Error()}
		case st.State != NotFound:
			return st
		}
		// The provider never received the key: sending it again is safe.
	}
	failpoint.Inject(failpoint.ProviderBeforeCall)
	rep, err := x.ask(ctx, "do", c, a.handler.Provider.Do)
	failpoint.Inject(failpoint.ProviderAfterCall) // the effect may have happened; nothing is recorded yet
	switch {
	case err != nil:
		return Report{State: Unknown, Reason: err.Error()}
	case rep.State == NotFound:
		return Report{State: Unknown, Reason: "provider answered not_found to a call"}
	}
	return rep
}

// ask makes one provider call (Do or Status) under CallTimeout, in a span
// and reported to the observer when one listens.
func (x *Executor) ask(ctx context.Context, op string, c Call, fn func(context.Context, Call) (Report, error)) (Report, error) {
	o := x.db.Observer()
	if o == nil {
		cctx, cancel := context.WithTimeout(ctx, x.cfg.CallTimeout)
		defer cancel()
		return x.callProvider(cctx, op, c, fn)
	}
	start := time.Now()
	ctx, end := o.Start(ctx, "oncekv.provider."+op,
		observe.Attr{Key: "oncekv.intent.kind", Value: c.Kind}, observe.Attr{Key: "oncekv.downstream_key", Value: c.DownstreamKey})
	cctx, cancel := context.WithTimeout(ctx, x.cfg.CallTimeout)
	rep, err := x.callProvider(cctx, op, c, fn)
	cancel()
	end(err)
	if o.ProviderCall != nil {
		outcome := rep.State.String()
		if err != nil {
			outcome = "error"
		}
		o.ProviderCall(ctx, observe.ProviderCall{Kind: c.Kind, Op: op, Outcome: outcome, Duration: time.Since(start)})
	}
	return rep, err
}

// callProvider calls fn, a provider's Do or Status, turning a panic into an
// error: a provider that panics may have acted, so its outcome is unknown,
// as a lost answer's is (the intent backs off, asks Status next, and parks
// after MaxAttempts). It must not take the process down: the reconciler
// would call it again after every restart.
func (x *Executor) callProvider(ctx context.Context, op string, c Call, fn func(context.Context, Call) (Report, error)) (rep Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			x.cfg.Logger.Error("provider panicked", "id", c.IntentID, "kind", c.Kind, "op", op, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			rep, err = Report{}, fmt.Errorf("sideeffect: provider's %s panicked: %v", op, p)
		}
	}()
	return fn(ctx, c)
}

// reportIntent tells the observer, once tx commits, that in entered its
// state (from prev; nil for a new intent). An attempt taken over keeps its
// state: it is not reported.
func (x *Executor) reportIntent(tx kv.Tx, in, prev *Intent) {
	o := x.db.Observer()
	if o == nil || o.Intent == nil || (prev != nil && prev.State == in.State) {
		return
	}
	e := observe.Intent{Kind: in.Kind, State: in.State.String()}
	tx.OnCommit(func() { o.Intent(context.Background(), e) })
}

// record writes an attempt's outcome, fenced by the attempt's version.
func (x *Executor) record(ctx context.Context, a attempt, rep Report, finish Finish) (*Intent, error) {
	var out *Intent
	err := x.db.Batch(ctx, func(tx kv.Tx) error {
		out = nil
		cur, err := loadIntent(tx, a.in.ID)
		if err != nil {
			return err
		}
		if cur == nil || cur.Version != a.in.Version {
			st := &StaleError{ID: a.in.ID, Executed: a.in.Version}
			if cur != nil {
				st.Current = cur.Version
			}
			out = cur
			return kv.Reject(st)
		}
		prev := *cur
		now := x.db.Clock().Now()
		switch rep.State {
		case Succeeded:
			cur.succeed(now, rep.Result, x.finishedExpiry(cur.Kind, now))
		case Failed:
			cur.fail(now, rep.Reason, x.finishedExpiry(cur.Kind, now))
		default:
			cur.unresolved(now, rep.Reason, x.cfg.MaxAttempts, x.cfg.Backoff)
		}
		if err := storeIntent(tx, cur, &prev); err != nil {
			return err
		}
		x.reportIntent(tx, cur, &prev)
		if ib := inflightNS.Bucket(tx); ib != nil {
			if err := ib.Delete([]byte(cur.ID)); err != nil {
				return err
			}
		}
		switch {
		case cur.State == StateSucceeded && a.handler.OnSucceeded != nil:
			err = x.completion("OnSucceeded", a.handler.OnSucceeded, tx, cur)
		case cur.State == StateFailed && a.handler.OnFailed != nil:
			err = x.completion("OnFailed", a.handler.OnFailed, tx, cur)
		}
		if err != nil {
			return fmt.Errorf("sideeffect: completion of intent %s (%s): %w", cur.ID, cur.State, err)
		}
		if finish != nil && cur.State.Final() {
			if err := x.completion("Finish", finish, tx, cur); err != nil {
				return err
			}
		}
		out = cur
		failpoint.Inject(failpoint.RecordBeforeCommit)
		return nil
	})
	if err == nil {
		failpoint.Inject(failpoint.RecordAfterCommit)
		x.cfg.Logger.Info("intent attempt", "id", out.ID, "kind", out.Kind, "subject", out.Subject,
			"attempt", out.Attempts, "state", out.State.String(), "error", out.LastError)
	}
	return out, err
}

// completion runs a completion (name): a handler's OnSucceeded or
// OnFailed, or a call's Finish (Perform's Respond), turning a panic into
// the completion's error, logged with the stack it was raised on: the
// transaction rolls back and the intent is tried again when due.
// Raised through the batch instead, the panic would lose that stack, and
// in the reconciler end the process, whose every restart meets the intent
// again.
func (x *Executor) completion(name string, hook func(kv.Tx, *Intent) error, tx kv.Tx, in *Intent) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if x.db.IsFault(p) {
				panic(p) // a page the disk could not read: kv refuses the database (kv.ErrReadFailed)
			}
			x.cfg.Logger.Error("intent completion panicked; its transaction rolled back", "id", in.ID, "kind", in.Kind, "hook", name,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("%s panicked: %v", name, p)
		}
	}()
	return hook(tx, in)
}

// isRejected reports errors that mean "nothing to do now" rather than failure.
func isRejected(err error) bool {
	return errors.Is(err, ErrBusy) || errors.Is(err, ErrNeedsAttention) || errors.Is(err, ErrStale) || errors.Is(err, ErrNotFound)
}

package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

// HeaderKey is the request header that carries the idempotency key.
const HeaderKey = "Idempotency-Key"

// HeaderReplayed is set to "true" on responses replayed from the ledger.
const HeaderReplayed = "Idempotent-Replayed"

// DefaultMaxBodyBytes is the request body limit (1 MiB); larger bodies get 413.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxStoredErrorBytes bounds the body of a 4xx answer that is
// stored for replay (4 KiB): a larger one is sent but not stored, so a
// client cannot grow the file with big error answers.
const DefaultMaxStoredErrorBytes = 4 << 10

// Config configures the middleware.
type Config struct {
	// Ledger stores the records. Required.
	Ledger *ledger.Ledger

	// Tenant returns the caller's tenant from the server's own
	// authentication (an API key, a session) — never from a client-supplied
	// header. An error answers 401. Required.
	Tenant func(r *http.Request) (string, error)

	// Methods that go through the ledger. nil means POST and PATCH. Other
	// methods pass straight to the handler.
	Methods []string

	// KeyOptional lets a request without Idempotency-Key through to the
	// handler, unprotected, instead of answering 400.
	KeyOptional bool

	// Route names the endpoint in the scope. nil means the ServeMux pattern
	// (r.Pattern, without its method), or the URL path when there is none.
	Route func(r *http.Request) string

	// MaxBodyBytes bounds the request body. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64

	// Fingerprint configures request fingerprints: list fields that differ
	// between retries of the same request (client timestamps, request IDs).
	Fingerprint fingerprint.Options

	// KeepHeaders are response headers stored and replayed besides
	// Content-Type and Location. Set-Cookie is never stored.
	KeepHeaders []string

	// Store decides which responses are stored for replay. nil stores every
	// status below 500; a response not stored is rolled back with the
	// handler's writes, so a retry runs again. Whatever Store says, a 4xx
	// answer is not stored when its handler wrote nothing (the request was
	// rejected before it did anything: Stripe's rule) or called DoNotStore,
	// or when its body exceeds MaxStoredErrorBytes.
	Store func(status int) bool

	// MaxStoredErrorBytes bounds the body of a stored 4xx answer. 0 means
	// DefaultMaxStoredErrorBytes.
	MaxStoredErrorBytes int

	// Wait makes a request that meets its own key in progress wait up to Wait
	// for the first attempt (in-process notification) instead of answering
	// 409 at once.
	Wait time.Duration

	// Executor performs the side effects of external routes (WrapExternal).
	Executor *sideeffect.Executor

	// Logger receives one line per request that hit the ledger. nil discards.
	Logger *slog.Logger

	// OnEvent, if set, is called once per request that hit the ledger, for
	// metrics.
	OnEvent func(Event)
}

// Event is what happened to one request.
type Event struct {
	Kind     EventKind
	Scope    string
	Key      string
	Status   int
	Duration time.Duration
}

// EventKind classifies a request's outcome.
type EventKind string

// Event kinds; Stats counts each.
const (
	EventExecuted   EventKind = "executed"    // ran and was stored
	EventReplayed   EventKind = "replayed"    // answered from the record
	EventMismatched EventKind = "mismatched"  // key reused for another request: 422
	EventInProgress EventKind = "in_progress" // 409
	EventTakeover   EventKind = "takeover"    // finished an abandoned attempt
	EventNotStored  EventKind = "not_stored"  // 5xx or panic: rolled back
	EventRejected   EventKind = "rejected"    // 400, 401, 413
	EventPending    EventKind = "pending"     // side effect outcome unknown: 502
	EventQuota      EventKind = "quota"       // tenant over its quota: 429
)

// Stats are the middleware's counters.
type Stats struct {
	Executed, Replayed, Mismatched, InProgress, Takeovers, NotStored, Rejected, Pending, Quota uint64
}

// Middleware is the idempotency-key middleware. It is safe for concurrent use.
type Middleware struct {
	cfg      Config
	fp       *fingerprint.Fingerprinter
	methods  []string
	keep     []string
	maxBody  int64
	maxResp  int
	maxError int
	log      *slog.Logger
	counters [9]atomic.Uint64
}

var eventIndex = map[EventKind]int{
	EventExecuted: 0, EventReplayed: 1, EventMismatched: 2, EventInProgress: 3,
	EventTakeover: 4, EventNotStored: 5, EventRejected: 6, EventPending: 7, EventQuota: 8,
}

// New validates cfg and returns the middleware.
func New(cfg Config) (*Middleware, error) {
	if cfg.Ledger == nil || cfg.Tenant == nil {
		return nil, errors.New("idemhttp: Config.Ledger and Config.Tenant are required")
	}
	fp, err := fingerprint.New(cfg.Fingerprint)
	if err != nil {
		return nil, err
	}
	m := &Middleware{cfg: cfg, fp: fp, maxBody: cfg.MaxBodyBytes, maxResp: cfg.Ledger.Config().MaxResponseBytes, log: cfg.Logger}
	if m.maxBody == 0 {
		m.maxBody = DefaultMaxBodyBytes
	}
	if m.maxBody < 0 {
		return nil, fmt.Errorf("idemhttp: MaxBodyBytes %d is negative", m.maxBody)
	}
	m.maxError = cfg.MaxStoredErrorBytes
	if m.maxError == 0 {
		m.maxError = DefaultMaxStoredErrorBytes
	}
	if m.maxError < 0 {
		return nil, fmt.Errorf("idemhttp: MaxStoredErrorBytes %d is negative", m.maxError)
	}
	m.methods = cfg.Methods
	if m.methods == nil {
		m.methods = []string{http.MethodPost, http.MethodPatch}
	}
	m.keep = []string{"Content-Type", "Location"}
	for _, h := range cfg.KeepHeaders {
		h = http.CanonicalHeaderKey(h)
		if h != "Set-Cookie" && !slices.Contains(m.keep, h) {
			m.keep = append(m.keep, h)
		}
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m, nil
}

// Stats returns the counters.
func (m *Middleware) Stats() Stats {
	c := &m.counters
	return Stats{
		Executed: c[0].Load(), Replayed: c[1].Load(), Mismatched: c[2].Load(), InProgress: c[3].Load(),
		Takeovers: c[4].Load(), NotStored: c[5].Load(), Rejected: c[6].Load(), Pending: c[7].Load(), Quota: c[8].Load(),
	}
}

func (m *Middleware) event(e Event) {
	m.counters[eventIndex[e.Kind]].Add(1)
	m.log.Info("idempotent request", "outcome", string(e.Kind), "scope", e.Scope, "key", e.Key, "status", e.Status, "duration", e.Duration)
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(e)
	}
}

type ctxKey int

const (
	txKey ctxKey = iota
	performKey
)

// Tx returns the transaction of the request being handled by an
// in-transaction route (Wrap). The handler does its business writes through
// it; they commit with the idempotency record, or not at all.
func Tx(ctx context.Context) (kv.Tx, bool) {
	tx, ok := ctx.Value(txKey).(kv.Tx)
	return tx, ok
}

// Wrap protects an in-transaction handler: one whose work is all in the
// database. The handler finds its transaction with Tx(r.Context()) and
// writes its response as usual; the response is captured, stored with the
// record and the handler's writes in one transaction (under group commit),
// and sent only after the commit. A 5xx or a panic rolls everything back and
// stores nothing.
//
// The handler may run more than once for one request (group commit re-runs
// a batch when another request in it fails), each time with a fresh
// response writer and body: it must have no effect outside the transaction.
func (m *Middleware) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, h, false) })
}

// WrapExternal protects a handler whose work is a side effect outside the
// database (the two-phase path). The handler validates its input, then calls
// Perform with the intent to execute; Perform claims the key, records the
// intent, calls the provider and stores the response. Responses the handler
// writes itself without Perform (a 404 for a missing order) are not stored.
func (m *Middleware) WrapExternal(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, h, true) })
}

func (m *Middleware) route(r *http.Request) string {
	if m.cfg.Route != nil {
		return m.cfg.Route(r)
	}
	if p := r.Pattern; p != "" {
		if method, rest, ok := strings.Cut(p, " "); ok && method == r.Method {
			return rest
		}
		return p
	}
	return r.URL.Path
}

func (m *Middleware) reject(w http.ResponseWriter, start time.Time, status int, typ, title, detail string) {
	WriteProblem(w, Problem{Type: typ, Title: title, Status: status, Detail: detail}, 0)
	m.event(Event{Kind: EventRejected, Status: status, Duration: time.Since(start)})
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, h http.Handler, external bool) {
	if !slices.Contains(m.methods, r.Method) {
		h.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	tenant, err := m.cfg.Tenant(r)
	if err != nil {
		m.reject(w, start, http.StatusUnauthorized, ProblemUnauthenticated, "Unauthenticated", err.Error())
		return
	}
	raw, present := r.Header[HeaderKey]
	if !present {
		if m.cfg.KeyOptional && !external {
			m.serveUnkeyed(w, r, h)
			return
		}
		if m.cfg.KeyOptional {
			h.ServeHTTP(w, r)
			return
		}
		m.reject(w, start, http.StatusBadRequest, ProblemKeyMissing, "Idempotency-Key header required",
			fmt.Sprintf("%s %s requires an Idempotency-Key header", r.Method, m.route(r)))
		return
	}
	if len(raw) != 1 {
		m.reject(w, start, http.StatusBadRequest, ProblemKeyInvalid, "Invalid Idempotency-Key", "send exactly one Idempotency-Key header")
		return
	}
	key, err := ParseKey(raw[0])
	if err != nil {
		m.reject(w, start, http.StatusBadRequest, ProblemKeyInvalid, "Invalid Idempotency-Key", err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			m.reject(w, start, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Request body too large",
				fmt.Sprintf("the body exceeds %d bytes", m.maxBody))
			return
		}
		m.reject(w, start, http.StatusBadRequest, ProblemInvalidBody, "Unreadable request body", err.Error())
		return
	}
	route := m.route(r)
	// The scope names the endpoint (route pattern); the fingerprint names the
	// concrete resource (escaped path and raw query), so a key reused on
	// another order is a mismatch, not a replay of the first order's answer.
	fp, err := m.fp.Sum(r.Method, r.URL.RequestURI(), r.Header.Get("Content-Type"), body)
	if err != nil {
		m.reject(w, start, http.StatusBadRequest, ProblemInvalidBody, "Invalid JSON body", err.Error())
		return
	}
	scope, err := ledger.Scope(tenant, r.Method, route)
	if err != nil {
		m.log.Error("idempotency scope", "error", err)
		WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
		return
	}
	req := ledger.Request{Scope: scope, Key: key, Fingerprint: fp, Wait: m.cfg.Wait}
	ev := Event{Scope: scope, Key: key}
	if external {
		m.serveExternal(w, r, h, req, body, ev, start)
		return
	}
	m.serveTx(w, r, h, req, body, ev, start)
}

// notStored carries a response that must not be stored: its transaction
// rolls back and the response goes to the client as is.
type notStored struct {
	c       *capture
	panic   any
	stack   []byte
	tooBig  bool
	release bool // a panic to re-raise (http.ErrAbortHandler)
	// badStatus is a status outside 100-999 the handler wrote.
	badStatus int
	// rejected is a 4xx not stored: nothing written, DoNotStore, or too big.
	rejected bool
}

func (e *notStored) Error() string {
	if e.panic != nil {
		return fmt.Sprintf("idemhttp: handler panicked: %v", e.panic)
	}
	return fmt.Sprintf("idemhttp: response %d not stored", e.c.statusCode())
}

var errResponseTooLarge = errors.New("idemhttp: response too large to store")

func (m *Middleware) serveTx(w http.ResponseWriter, r *http.Request, h http.Handler, req ledger.Request, body []byte, ev Event, start time.Time) {
	ctx := r.Context()
	var last *capture
	res, err := m.cfg.Ledger.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
		c := newCapture(m.maxResp)
		last = c
		wrote := false
		rr := r.WithContext(context.WithValue(ctx, txKey, kv.Tx(trackedTx{tx, &wrote})))
		rr.Body = io.NopCloser(bytes.NewReader(body))
		rr.ContentLength = int64(len(body))
		if ns := runHandler(h, c, rr); ns != nil {
			return ledger.Response{}, ns
		}
		if c.overflow {
			return ledger.Response{}, &notStored{c: c, tooBig: true}
		}
		if c.badStatus != 0 {
			return ledger.Response{}, &notStored{c: c, badStatus: c.badStatus}
		}
		status := c.statusCode()
		if !m.stores(status) {
			return ledger.Response{}, &notStored{c: c}
		}
		if status >= 400 && status < 500 && (c.noStore || !wrote || c.body.Len() > m.maxError) {
			return ledger.Response{}, &notStored{c: c, rejected: true}
		}
		return ledger.Response{Status: status, Header: m.kept(c.header), Body: bytes.Clone(c.body.Bytes())}, nil
	})
	var ns *notStored
	switch {
	case err == nil && res.Replayed:
		m.writeReplay(w, res.Response)
		ev.Kind, ev.Status = EventReplayed, res.Response.Status
	case err == nil:
		last.writeTo(w) // the full response, not only the kept headers
		ev.Kind, ev.Status = EventExecuted, res.Response.Status
		if res.Takeover {
			m.event(Event{Kind: EventTakeover, Scope: ev.Scope, Key: ev.Key, Status: ev.Status})
		}
	case errors.As(err, &ns):
		ev.Kind = EventNotStored
		switch {
		case ns.release:
			m.event(ev)
			panic(ns.panic)
		case ns.panic != nil:
			m.log.Error("handler panicked; transaction rolled back", "scope", req.Scope, "key", req.Key, "panic", fmt.Sprint(ns.panic), "stack", string(ns.stack))
			WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
			ev.Status = http.StatusInternalServerError
		case ns.badStatus != 0:
			m.log.Error("handler wrote an invalid status; transaction rolled back", "scope", req.Scope, "key", req.Key, "status", ns.badStatus)
			WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
				Detail: fmt.Sprintf("the handler answered status %d, outside 100-999", ns.badStatus)}, 0)
			ev.Status = http.StatusInternalServerError
		case ns.tooBig:
			WriteProblem(w, Problem{Type: ProblemInternal, Title: "Response too large to store", Status: http.StatusInternalServerError,
				Detail: fmt.Sprintf("the response exceeds %d bytes", m.maxResp)}, 0)
			ev.Status = http.StatusInternalServerError
		default:
			ns.c.writeTo(w)
			ev.Status = ns.c.statusCode()
			if ns.rejected {
				ev.Kind = EventRejected
			}
		}
	default:
		ev.Kind, ev.Status = m.writeLedgerError(w, err)
	}
	ev.Duration = time.Since(start)
	m.event(ev)
}

// serveUnkeyed runs an in-transaction handler for a request without a key
// (Config.KeyOptional): the same transaction and rollback rules, no record.
func (m *Middleware) serveUnkeyed(w http.ResponseWriter, r *http.Request, h http.Handler) {
	var last *capture
	err := m.cfg.Ledger.DB().Batch(r.Context(), func(tx kv.Tx) error {
		c := newCapture(0)
		last = c
		if ns := runHandler(h, c, r.WithContext(context.WithValue(r.Context(), txKey, tx))); ns != nil {
			return ns
		}
		if c.statusCode() >= 500 {
			return &notStored{c: c}
		}
		return nil
	})
	var ns *notStored
	switch {
	case err == nil:
		last.writeTo(w)
	case errors.As(err, &ns) && ns.release:
		panic(ns.panic)
	case errors.As(err, &ns) && ns.panic == nil:
		ns.c.writeTo(w)
	default:
		m.log.Error("unkeyed request failed", "error", err)
		WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
	}
}

// runHandler runs h, turning a panic into a *notStored.
func runHandler(h http.Handler, w http.ResponseWriter, r *http.Request) (ns *notStored) {
	defer func() {
		if p := recover(); p != nil {
			ns = &notStored{panic: p, stack: debug.Stack(), release: p == http.ErrAbortHandler}
		}
	}()
	h.ServeHTTP(w, r)
	return nil
}

func (m *Middleware) stores(status int) bool {
	if m.cfg.Store != nil {
		return m.cfg.Store(status)
	}
	return status < 500
}

func (m *Middleware) kept(h http.Header) http.Header {
	out := http.Header{}
	for _, name := range m.keep {
		if v, ok := h[name]; ok {
			out[name] = slices.Clone(v)
		}
	}
	return out
}

func (m *Middleware) writeReplay(w http.ResponseWriter, resp ledger.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	h.Set(HeaderReplayed, "true")
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(resp.Body)
}

// writeLedgerError maps the ledger's rejections to problems.
func (m *Middleware) writeLedgerError(w http.ResponseWriter, err error) (EventKind, int) {
	var me *ledger.MismatchError
	var ip *ledger.InProgressError
	var pe *sideeffect.PendingError
	var be *sideeffect.BlockedError
	var qe *ledger.QuotaError
	switch {
	case errors.As(err, &qe):
		WriteProblem(w, Problem{Type: ProblemQuota, Title: "Quota of stored requests exceeded", Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("this tenant keeps %d idempotency records (%d bytes), at its limit; they expire with their retention", qe.Usage.Records, qe.Usage.Bytes)}, qe.RetryAfter)
		return EventQuota, http.StatusTooManyRequests
	case errors.As(err, &me):
		WriteProblem(w, Problem{Type: ProblemKeyReused, Title: "Idempotency-Key reused with a different request", Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("this key was first used with request %s; this request is %s", me.Stored.Short(), me.Got.Short())}, 0)
		return EventMismatched, http.StatusUnprocessableEntity
	case errors.As(err, &ip):
		WriteProblem(w, Problem{Type: ProblemInProgress, Title: "A request with this Idempotency-Key is in progress", Status: http.StatusConflict,
			Detail: "retry after the indicated delay"}, max(ip.RetryAfter, time.Second))
		return EventInProgress, http.StatusConflict
	case errors.As(err, &pe):
		WriteProblem(w, Problem{Type: ProblemOutcomePending, Title: "Upstream outcome not known yet", Status: http.StatusBadGateway,
			Detail: "the upstream call failed or its answer was lost; retry with the same Idempotency-Key"}, max(pe.RetryAfter, time.Second))
		return EventPending, http.StatusBadGateway
	case errors.As(err, &be) && errors.Is(err, sideeffect.ErrBackoff):
		WriteProblem(w, Problem{Type: ProblemBackoff, Title: "Upstream call backing off", Status: http.StatusServiceUnavailable,
			Detail: "the last upstream attempt had an unknown outcome; retry with the same Idempotency-Key after the indicated delay"}, max(be.RetryAfter, time.Second))
		return EventPending, http.StatusServiceUnavailable
	case errors.Is(err, sideeffect.ErrNeedsAttention):
		WriteProblem(w, Problem{Type: ProblemNeedsAttention, Title: "Side effect needs attention", Status: http.StatusConflict,
			Detail: "the upstream call is in state needs_attention after repeated unknown outcomes; an operator must requeue or resolve it (oncekv intents)"}, 0)
		return EventPending, http.StatusConflict
	case errors.Is(err, context.Canceled):
		return EventNotStored, 499
	}
	m.log.Error("idempotent request failed", "error", err)
	WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
	return EventNotStored, http.StatusInternalServerError
}

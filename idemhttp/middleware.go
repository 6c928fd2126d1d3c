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
	// running is the capture of the handler this middleware runs inside
	// the database's write transaction now, if any (runInTx): a request
	// that reaches its deadline waiting for the writer names it
	// (reportHolder).
	running atomic.Pointer[capture]
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

// route names the endpoint in the scope: Config.Route's name, the
// ServeMux pattern without its method, or else the URL path, which the
// client chose (fromPath).
func (m *Middleware) route(r *http.Request) (route string, fromPath bool) {
	if m.cfg.Route != nil {
		return m.cfg.Route(r), false
	}
	if p := r.Pattern; p != "" {
		if method, rest, ok := strings.Cut(p, " "); ok && method == r.Method {
			return rest, false
		}
		return p, false
	}
	return r.URL.Path, true
}

func (m *Middleware) reject(w http.ResponseWriter, start time.Time, status int, typ, title, detail string) {
	m.respond(w, Event{}, start, problemAnswer(EventRejected, Problem{Type: typ, Title: title, Status: status, Detail: detail}, 0))
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
			if body, ok := m.readBody(w, r, start); ok {
				m.serveUnkeyed(w, r, h, body)
			}
			return
		}
		if m.cfg.KeyOptional {
			h.ServeHTTP(w, r)
			return
		}
		route, _ := m.route(r)
		m.reject(w, start, http.StatusBadRequest, ProblemKeyMissing, "Idempotency-Key header required",
			fmt.Sprintf("%s %s requires an Idempotency-Key header", r.Method, route))
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
	body, ok := m.readBody(w, r, start)
	if !ok {
		return
	}
	route, fromPath := m.route(r)
	// The scope names the endpoint (route pattern); the fingerprint names the
	// concrete resource (escaped path and raw query), so a key reused on
	// another order is a mismatch, not a replay of the first order's answer.
	fp, err := m.fp.Sum(r.Method, r.URL.RequestURI(), fingerprint.BodyType(r.Header), body)
	if err != nil {
		m.reject(w, start, http.StatusBadRequest, ProblemInvalidBody, "Invalid JSON body", err.Error())
		return
	}
	scope, err := ledger.Scope(tenant, r.Method, route)
	if err != nil {
		if _, tenantErr := ledger.Scope(tenant, r.Method, "/"); fromPath && tenantErr == nil {
			// The client's path, not the service, made the scope unusable
			// (a NUL byte, a path of a kilobyte): its request is at fault.
			m.reject(w, start, http.StatusBadRequest, ProblemPathInvalid, "Request path cannot scope an Idempotency-Key", pathProblem(route))
			return
		}
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

// pathProblem says why a path cannot be part of a scope (see ledger.Scope).
func pathProblem(path string) string {
	if strings.IndexByte(path, 0) >= 0 {
		return "the path contains a NUL byte (%00)"
	}
	return fmt.Sprintf("the path is %d bytes; the scope it is part of holds at most %d with the tenant and method", len(path), ledger.MaxScopeLen)
}

// readBody reads the request body, up to MaxBodyBytes, before any
// transaction begins, and answers 413 (or 400) itself when it cannot: a
// handler run in a transaction reads the body from memory, as often as
// group commit runs it, and never holds the writer waiting for a slow
// client.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request, start time.Time) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			m.reject(w, start, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge, "Request body too large",
				fmt.Sprintf("the body exceeds %d bytes", m.maxBody))
			return nil, false
		}
		m.reject(w, start, http.StatusBadRequest, ProblemInvalidBody, "Unreadable request body", err.Error())
		return nil, false
	}
	return body, true
}

// runInTx runs an in-transaction handler (runHandler) into c with a
// context that carries tx (Tx) and is marked as inside the database's
// write transaction (kv.DB.WithinTx) while the handler runs: a handler
// that starts a write of its own with it (Update, a managed call such as
// ledger.Do) gets kv.ErrNestedTx at once, not a wait, for ever, for the
// writer its own request holds.
func (m *Middleware) runInTx(ctx context.Context, tx kv.Tx, h http.Handler, c *capture, r *http.Request, body []byte) *notStored {
	hctx := m.cfg.Ledger.DB().WithinTx(context.WithValue(ctx, txKey, tx))
	defer hctx.End()
	c.since = time.Now()
	m.running.Store(c)
	defer m.running.CompareAndSwap(c, nil)
	return runHandler(m.cfg.Ledger.DB(), h, c, withBody(hctx, r, body))
}

// reportHolder logs, once per run, the in-transaction handler that has
// held the database's writer since before waitFrom, when a request that
// began waiting then reached its deadline: a handler that waits on
// something inside its transaction holds every write of the service, and
// this names it (kv.DB.Writer shows how long, not whose). A backend with
// several writers (etcd) has no such holder.
func (m *Middleware) reportHolder(waitFrom time.Time) {
	c := m.running.Load()
	if c == nil || !m.cfg.Ledger.DB().Traits().SingleWriter || !c.since.Before(waitFrom) || !c.reported.CompareAndSwap(false, true) {
		return
	}
	scope, key := c.scope, c.key
	if c.unkeyed != nil {
		scope = c.unkeyed.Method + " " + c.unkeyed.URL.Path
	}
	m.log.Warn("a handler holds the database's writer: requests queued behind it reach their deadlines",
		"holder_scope", scope, "holder_key", key, "held", time.Since(c.since).Round(time.Millisecond))
}

// withBody returns r with ctx and a fresh reader of body: every run of a
// handler reads the whole body.
func withBody(ctx context.Context, r *http.Request, body []byte) *http.Request {
	rr := r.WithContext(ctx)
	rr.Body = io.NopCloser(bytes.NewReader(body))
	rr.ContentLength = int64(len(body))
	return rr
}

// serveUnkeyed runs a request without a key (KeyOptional) in a transaction
// of its own, under group commit, unprotected: a 5xx rolls its writes back.
func (m *Middleware) serveUnkeyed(w http.ResponseWriter, r *http.Request, h http.Handler, body []byte) {
	var last *capture
	waitFrom := time.Now()
	err := m.cfg.Ledger.DB().Batch(r.Context(), func(tx kv.Tx) error {
		c := newCapture(0)
		c.unkeyed = r
		last = c
		if ns := m.runInTx(r.Context(), tx, h, c, r, body); ns != nil {
			return ns
		}
		if c.badStatus != 0 {
			return &notStored{c: c, badStatus: c.badStatus}
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
	case errors.As(err, &ns):
		route, _ := m.route(r)
		m.notStoredAnswer(ns, "method", r.Method, "route", route).write(w)
	default:
		m.ledgerAnswer(err, waitFrom).write(w)
	}
}

// runHandler runs h, turning a panic into a *notStored; but a memory
// fault on db's file (db.IsFault: a page the disk could not read, met
// through the request's transaction) goes on to kv, which refuses the
// database from then on (kv.ErrReadFailed) and answers the call so. A
// fault elsewhere (the handler's own memory map) is the handler's panic.
func runHandler(db *kv.DB, h http.Handler, w http.ResponseWriter, r *http.Request) (ns *notStored) {
	defer func() {
		if p := recover(); p != nil {
			if db.IsFault(p) {
				panic(p)
			}
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

// writeStored writes a response the ledger holds (replayed: with
// HeaderReplayed), with its status (storedStatus).
func writeStored(w http.ResponseWriter, resp ledger.Response, replayed bool) {
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	send(w, resp.Header, storedStatus(resp), resp.Body)
}

// storedStatus is the status a stored response is sent with. Status 0,
// which the ledger allows for responses that are not HTTP, is a 200, as
// a handler that writes no status gets.
func storedStatus(resp ledger.Response) int {
	if resp.Status == 0 {
		return http.StatusOK
	}
	return resp.Status
}

// answer is a response decided before it is written, so that its event
// is reported first (Middleware.answered): its kind, its status, and what
// writes it.
type answer struct {
	kind   EventKind
	status int
	write  func(http.ResponseWriter)
}

// problemAnswer is the answer that writes problem p (with Retry-After
// when retryAfter is positive).
func problemAnswer(kind EventKind, p Problem, retryAfter time.Duration) answer {
	return answer{kind: kind, status: p.Status, write: func(w http.ResponseWriter) { WriteProblem(w, p, retryAfter) }}
}

// ledgerAnswer decides the answer to the error of a request that did not
// run to a stored answer: the ledger's rejections, a side effect's state,
// a closed database, or an unexpected failure (500, logged).
func (m *Middleware) ledgerAnswer(err error, waitFrom time.Time) answer {
	var me *ledger.MismatchError
	var ip *ledger.InProgressError
	var pe *sideeffect.PendingError
	var be *sideeffect.BlockedError
	var qe *ledger.QuotaError
	switch {
	case errors.As(err, &qe):
		return problemAnswer(EventQuota, Problem{Type: ProblemQuota, Title: "Quota of stored requests exceeded", Status: http.StatusTooManyRequests,
			Detail: fmt.Sprintf("this tenant keeps %d idempotency records (%d bytes), at its limit; they expire with their retention", qe.Usage.Records, qe.Usage.Bytes)}, qe.RetryAfter)
	case errors.As(err, &me):
		return problemAnswer(EventMismatched, Problem{Type: ProblemKeyReused, Title: "Idempotency-Key reused with a different request", Status: http.StatusUnprocessableEntity,
			Detail: fmt.Sprintf("this key was first used with request %s; this request is %s", me.Stored.Short(), me.Got.Short())}, 0)
	case errors.As(err, &ip):
		return problemAnswer(EventInProgress, Problem{Type: ProblemInProgress, Title: "A request with this Idempotency-Key is in progress", Status: http.StatusConflict,
			Detail: "retry after the indicated delay"}, max(ip.RetryAfter, time.Second))
	case errors.As(err, &pe):
		return problemAnswer(EventPending, Problem{Type: ProblemOutcomePending, Title: "Upstream outcome not known yet", Status: http.StatusBadGateway,
			Detail: "the upstream call failed or its answer was lost; retry with the same Idempotency-Key"}, max(pe.RetryAfter, time.Second))
	case errors.As(err, &be) && errors.Is(err, sideeffect.ErrBackoff):
		return problemAnswer(EventPending, Problem{Type: ProblemBackoff, Title: "Upstream call backing off", Status: http.StatusServiceUnavailable,
			Detail: "the last upstream attempt had an unknown outcome; retry with the same Idempotency-Key after the indicated delay"}, max(be.RetryAfter, time.Second))
	case errors.Is(err, sideeffect.ErrNeedsAttention):
		return problemAnswer(EventPending, Problem{Type: ProblemNeedsAttention, Title: "Side effect needs attention", Status: http.StatusConflict,
			Detail: "the upstream call is in state needs_attention after repeated unknown outcomes; an operator must requeue or resolve it (oncekv intents)"}, 0)
	case errors.Is(err, context.Canceled):
		return answer{kind: EventNotStored, status: 499, write: func(http.ResponseWriter) {}} // the client has gone: nothing to send
	case errors.Is(err, kv.ErrSyncFailed):
		// A commit's sync failed after its meta page was written: the
		// database refuses every call until it is reopened, and this
		// request's own commit, if it was the one, may or may not be on
		// the disk. A retry after the reopen (a restart) is answered
		// either way.
		m.log.Error("idempotent request refused: the database's sync failed; close and reopen it (restart the service)", "error", err)
		kind := EventNotStored
		if errors.Is(err, kv.ErrCommitUnknown) {
			kind = EventPending
		}
		return problemAnswer(kind, Problem{Type: ProblemUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the store could not sync a write to its disk and takes no request until it is reopened; retry with the same Idempotency-Key: the retry is answered either way"}, time.Second)
	case errors.Is(err, kv.ErrReadFailed):
		// A page of the file could not be read (the disk failed it): the
		// database refuses every call until it is reopened. Nothing of
		// this request was committed.
		m.log.Error("idempotent request refused: the database's file could not be read; close and reopen it (restart the service)", "error", err)
		return problemAnswer(EventNotStored, Problem{Type: ProblemUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the store could not read its disk and takes no request until it is reopened; retry with the same Idempotency-Key"}, time.Second)
	case kv.IsNoSpace(err):
		// The database's disk is full, or its user's quota: a write
		// refused (not a sync failed after the commit: the case above).
		// Nothing was stored, and the same key runs once space returns,
		// with no restart. A write refused during the pause that follows
		// a failed commit (kv.NoSpaceError) is logged at debug level: the
		// failed commit was logged, once.
		retry := time.Second
		if nse, paused := errors.AsType[*kv.NoSpaceError](err); paused {
			m.log.Debug("idempotent request not stored: the database's disk is full (a write refused during the pause after a failed commit)", "error", err)
			retry = max(retry, min(time.Until(nse.Until), 5*time.Second))
		} else {
			m.log.Error("idempotent request not stored: the database's disk is full", "error", err)
		}
		return problemAnswer(EventNotStored, Problem{Type: ProblemUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the store's disk is full; nothing was stored: retry with the same Idempotency-Key after the indicated delay"}, retry)
	case errors.Is(err, kv.ErrCommitUnknown):
		// The store (etcd) took the commit and could not say whether it
		// applied: the retry finds out, and is answered either way (the
		// stored answer if it applied).
		m.log.Warn("idempotent request's commit outcome unknown", "error", err)
		return problemAnswer(EventPending, Problem{Type: ProblemUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the store could not confirm whether this request was saved; retry with the same Idempotency-Key: the retry is answered either way"}, time.Second)
	case errors.Is(err, kv.ErrClosed), errors.Is(err, context.DeadlineExceeded):
		if errors.Is(err, context.DeadlineExceeded) {
			m.reportHolder(waitFrom)
		}
		// Nothing was stored: the database is closed (the service is
		// shutting down) or the request's deadline passed while it waited
		// for a transaction. A side effect it started (external routes) is
		// recorded by its intent; the same key may be sent again.
		m.log.Warn("idempotent request not finished", "error", err)
		return problemAnswer(EventNotStored, Problem{Type: ProblemUnavailable, Title: "Service unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the service is shutting down, or the request's deadline passed before it finished; retry with the same Idempotency-Key"}, time.Second)
	case errors.Is(err, ledger.ErrInvalidResponse):
		// A Respond (external route) or work answered a status the ledger
		// does not store: the log has the status.
		m.log.Error("idempotent request's answer cannot be stored", "error", err)
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: "the service's answer has a status that cannot be stored (a stored answer's status is 200-999); nothing was stored"}, 0)
	case errors.Is(err, ledger.ErrResponseTooLarge):
		m.log.Error("idempotent request's answer cannot be stored", "error", err)
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Response too large to store", Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf("the response exceeds %d bytes", m.maxResp)}, 0)
	case errors.Is(err, kv.ErrTxTooLarge):
		// The handler's writes and the stored answer do not fit in one
		// transaction of the store (etcd's 1.5 MiB and 128 operations).
		// Nothing was stored, and a retry fails the same way.
		m.log.Error("idempotent request's transaction too large for the store", "error", err)
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Too large to store", Status: http.StatusInternalServerError,
			Detail: "the request's writes and its answer do not fit in one transaction of the store; nothing was stored, and a retry fails the same way"}, 0)
	}
	m.log.Error("idempotent request failed", "error", err)
	return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
}

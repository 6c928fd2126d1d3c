package idemhttp

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// The in-transaction route (Wrap): claim, business writes and completion in
// one transaction, under group commit.

// notStored carries a response that must not be stored: its transaction
// rolls back and the response goes to the client as is (or, for a panic,
// a bad status or a response too large, a problem in its place).
type notStored struct {
	c       *capture
	panic   any
	stack   []byte
	tooBig  bool
	release bool // a panic to re-raise (http.ErrAbortHandler)
	// badStatus is a status the handler wrote that cannot be stored: one
	// outside 100-999, or a 101.
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
		c.scope, c.key = req.Scope, req.Key
		last = c
		wrote := false
		if ns := m.runInTx(ctx, trackedTx{tx, &wrote}, h, c, r, body); ns != nil {
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
		return ledger.Response{Status: status, Header: m.kept(c.sentHeader()), Body: bytes.Clone(c.body.Bytes())}, nil
	})
	var ns *notStored
	switch {
	case err == nil && res.Replayed:
		ev.Kind, ev.Status = EventReplayed, storedStatus(res.Response)
		m.answered(ev, start)
		writeStored(w, res.Response, true)
	case err == nil:
		ev.Kind, ev.Status = EventExecuted, res.Response.Status
		if res.Takeover {
			m.event(Event{Kind: EventTakeover, Scope: ev.Scope, Key: ev.Key, Status: ev.Status})
		}
		m.answered(ev, start)
		last.writeTo(w) // the full response, not only the kept headers
	case errors.As(err, &ns) && ns.release:
		ev.Kind = EventNotStored
		m.event(ev)
		panic(ns.panic)
	case errors.As(err, &ns):
		m.respond(w, ev, start, m.notStoredAnswer(ns, "scope", req.Scope, "key", req.Key))
	default:
		m.respond(w, ev, start, m.ledgerAnswer(err, start))
	}
}

// answered reports ev, its duration counted until now, before its answer
// is written: a client that has the whole answer finds it counted
// (Stats, Config.OnEvent, the observer) whatever its size, where a large
// answer with its Content-Length leaves as it is written.
func (m *Middleware) answered(ev Event, start time.Time) {
	ev.Duration = time.Since(start)
	m.event(ev)
}

// respond reports ev with a's kind and status (answered), then writes a.
func (m *Middleware) respond(w http.ResponseWriter, ev Event, start time.Time, a answer) {
	ev.Kind, ev.Status = a.kind, a.status
	m.answered(ev, start)
	a.write(w)
}

// notStoredAnswer is the answer to a run of a handler whose response was
// not stored: rejected (a 4xx that wrote nothing, or DoNotStore), or not
// stored. A panic, a status that cannot be stored and a response too large
// are the service's errors: a 500 problem, the first two logged with attrs
// (the request's scope and key, or its method and route). Any other
// response (a 5xx, a 4xx that wrote nothing) is sent as the handler wrote
// it.
func (m *Middleware) notStoredAnswer(ns *notStored, attrs ...any) answer {
	switch {
	case ns.panic != nil:
		m.log.Error("handler panicked; transaction rolled back", append(attrs, "panic", fmt.Sprint(ns.panic), "stack", string(ns.stack))...)
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0)
	case ns.badStatus != 0:
		m.log.Error("handler wrote an invalid status; transaction rolled back", append(attrs, "status", ns.badStatus)...)
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf("the handler answered status %d, which cannot be stored: a stored answer's status is 200-999", ns.badStatus)}, 0)
	case ns.tooBig:
		return problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Response too large to store", Status: http.StatusInternalServerError,
			Detail: fmt.Sprintf("the response exceeds %d bytes", m.maxResp)}, 0)
	}
	kind := EventNotStored
	if ns.rejected {
		kind = EventRejected
	}
	return answer{kind: kind, status: ns.c.statusCode(), write: ns.c.writeTo}
}

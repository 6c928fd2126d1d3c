package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
)

type performState struct {
	m     *Middleware
	req   ledger.Request
	ev    Event
	start time.Time
	used  bool
	// mark is the handler's context, marked as inside a write transaction
	// of the ledger's database only while Respond runs in Perform's
	// finishing transaction (a managed write there would wait for ever
	// for the writer that transaction holds).
	mark *kv.InTx
}

func (m *Middleware) serveExternal(w http.ResponseWriter, r *http.Request, h http.Handler, req ledger.Request, body []byte, ev Event, start time.Time) {
	// A retry of a finished request is answered before the handler runs;
	// with Config.Wait, a duplicate of one in progress waits for it first.
	replay, err := m.cfg.Ledger.Peek(r.Context(), req)
	until := time.Now().Add(req.Wait)
	for ip := (*ledger.InProgressError)(nil); req.Wait > 0 && errors.As(err, &ip) && m.cfg.Ledger.Wait(r.Context(), ip, until); {
		replay, err = m.cfg.Ledger.Peek(r.Context(), req)
	}
	switch {
	case replay != nil:
		ev.Kind, ev.Status = EventReplayed, storedStatus(replay.Response)
		m.answered(ev, start)
		writeStored(w, replay.Response, true)
		return
	case err != nil:
		m.respond(w, ev, start, m.ledgerAnswer(err, start))
		return
	}
	mark := m.cfg.Ledger.DB().WithinTx(r.Context())
	mark.End() // until Respond runs
	ps := &performState{m: m, req: req, ev: ev, start: start, mark: mark}
	tw := &trackedWriter{ResponseWriter: w}
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler { // net/http's sentinel, compared as net/http compares it
			panic(p)
		}
		// As an in-transaction handler's panic is: logged with its stack,
		// and a 500 problem when the handler had written nothing. After
		// Perform's answer (or the handler's own) the response stands.
		m.log.Error("handler panicked", "scope", req.Scope, "key", req.Key, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		if !tw.wrote {
			m.respond(w, ev, start, problemAnswer(EventNotStored, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError}, 0))
		}
	}()
	h.ServeHTTP(tw, withBody(context.WithValue(mark, performKey, ps), r, body))
}

// trackedWriter notes whether an external route's handler wrote anything,
// so that its panic can be answered with a problem only when it had not.
// Unwrap lets http.ResponseController reach the server's writer.
type trackedWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackedWriter) WriteHeader(code int) { t.wrote = true; t.ResponseWriter.WriteHeader(code) }

func (t *trackedWriter) Write(p []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(p)
}

// Flush passes a flush on, for handlers that assert http.Flusher.
func (t *trackedWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		t.wrote = true
		f.Flush()
	}
}

// Unwrap returns the server's writer.
func (t *trackedWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// Perform runs the side effect of an external route's request: it claims
// the request's idempotency key, records the intent described by spec,
// executes it through the middleware's Executor and writes the response
// built by respond — stored, so a retry replays it. It must be called once,
// from a handler wrapped by WrapExternal, before anything is written to w.
//
// When the outcome is unknown (the provider failed or its answer was lost),
// it answers 502 with Retry-After and stores nothing: a retry with the same
// key asks the provider before calling it again. When the provider call
// outlives its intent's lease (sideeffect.Config.Lease, which exceeds the
// call timeout: a provider that ignores its context) and a retry takes the
// request over, the retry finishes it: Perform answers what the retry
// stored, as a replay, or 409 with Retry-After while it runs. It returns
// true when it wrote a stored (or replayed) response.
//
// respond runs inside the finishing transaction and must only read (see
// sideeffect.Respond): while it runs, r.Context() is marked as inside that
// transaction (kv.DB.WithinTx), so a write it starts with that context
// fails with kv.ErrNestedTx instead of waiting for ever for the writer
// its own transaction holds.
func Perform(w http.ResponseWriter, r *http.Request, spec sideeffect.Spec, respond sideeffect.Respond) bool {
	ps, ok := r.Context().Value(performKey).(*performState)
	if !ok || ps.used || ps.m.cfg.Executor == nil {
		WriteProblem(w, Problem{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: "idemhttp.Perform needs a handler wrapped by WrapExternal with Config.Executor, called once"}, 0)
		return false
	}
	ps.used = true
	m, ev := ps.m, ps.ev
	res, err := m.cfg.Executor.Perform(r.Context(), m.cfg.Ledger, ps.req, spec, func(tx kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
		ps.mark.Resume()
		defer ps.mark.End()
		return respond(tx, in)
	})
	if err != nil {
		m.respond(w, ev, ps.start, m.ledgerAnswer(err, ps.start))
		return false
	}
	ev.Kind, ev.Status = EventExecuted, storedStatus(res.Response)
	if res.Replayed {
		ev.Kind = EventReplayed
	} else if res.Takeover {
		m.event(Event{Kind: EventTakeover, Scope: ev.Scope, Key: ev.Key, Status: ev.Status})
	}
	m.answered(ev, ps.start)
	writeStored(w, res.Response, res.Replayed)
	return true
}

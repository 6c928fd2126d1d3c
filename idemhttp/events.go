package idemhttp

import (
	"context"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
)

// Event is what happened to one request. Its Duration runs from the
// request's arrival at the middleware to its answer, the answer's writing
// left out.
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

var eventIndex = map[EventKind]int{
	EventExecuted: 0, EventReplayed: 1, EventMismatched: 2, EventInProgress: 3,
	EventTakeover: 4, EventNotStored: 5, EventRejected: 6, EventPending: 7, EventQuota: 8,
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
	if m.log.Enabled(context.Background(), slog.LevelInfo) { // no boxing of the attributes for a logger that discards them
		m.log.Info("idempotent request", "outcome", string(e.Kind), "scope", e.Scope, "key", e.Key, "status", e.Status, "duration", e.Duration)
	}
	if m.cfg.OnEvent != nil {
		m.cfg.OnEvent(e)
	}
	if o := m.cfg.Ledger.DB().Observer(); o != nil && o.Request != nil {
		o.Request(context.Background(), observe.Request{Call: "http", Outcome: eventOutcome[e.Kind], Tenant: ledger.TenantOf(e.Scope), Duration: e.Duration})
	}
}

// eventOutcome is what the observer hears of each event.
var eventOutcome = map[EventKind]observe.Outcome{
	EventExecuted: observe.OutcomeNew, EventReplayed: observe.OutcomeReplay, EventMismatched: observe.OutcomeMismatch,
	EventInProgress: observe.OutcomeInProgress, EventTakeover: observe.OutcomeTakeover, EventNotStored: observe.OutcomeError,
	EventRejected: observe.OutcomeRejected, EventPending: observe.OutcomePending, EventQuota: observe.OutcomeQuota,
}

package observe

import (
	"context"
	"time"
)

// Observer receives what oncekv's packages report. Every field may be nil.
type Observer struct {
	Request      func(ctx context.Context, e Request)
	Commit       func(e Commit)
	Sweep        func(e Sweep)
	Intent       func(ctx context.Context, e Intent)
	ProviderCall func(ctx context.Context, e ProviderCall)
	Publish      func(ctx context.Context, e Publish)
	OutboxLag    func(e OutboxLag)
	Message      func(ctx context.Context, e Message)
	// Span opens a span named name with attrs and returns the context
	// carrying it and the function that ends it with the operation's error.
	Span func(ctx context.Context, name string, attrs ...Attr) (context.Context, func(err error))
}

// Attr is a span attribute.
type Attr struct {
	Key, Value string
}

// Outcome is what a ledger call did with a request.
type Outcome string

// Request outcomes.
const (
	OutcomeNew        Outcome = "new"         // ran (Do) or claimed (Claim) for the first time
	OutcomeReplay     Outcome = "replay"      // answered from the stored record
	OutcomeMismatch   Outcome = "mismatch"    // the key was used for another request
	OutcomeInProgress Outcome = "in_progress" // another attempt holds the key
	OutcomeWaited     Outcome = "waited"      // waited for another attempt, then replayed its answer
	OutcomeQuota      Outcome = "quota"       // the tenant is at its quota
	OutcomeTakeover   Outcome = "takeover"    // an abandoned attempt's claim taken over
	OutcomeLeaseLost  Outcome = "lease_lost"  // a Complete whose claim a retry took over after its lease: nothing stored
	OutcomeRejected   Outcome = "rejected"    // refused before it wrote (idemhttp: 400, 401, 413, a 4xx not stored)
	OutcomePending    Outcome = "pending"     // a side effect's outcome is unknown (idemhttp: 502)
	OutcomeError      Outcome = "error"       // failed: the work's error, a conflict, a closed database
)

// Request is one ledger call (Do, Claim, Complete: the Tx forms report
// nothing, their caller owns the transaction) or one HTTP request the
// idemhttp middleware served.
type Request struct {
	Call     string // "do", "claim", "complete" or "http"
	Outcome  Outcome
	Tenant   string
	Duration time.Duration
	// RecordBytes is what a new record stores (0 otherwise).
	RecordBytes int
}

// Commit is one committed write transaction.
type Commit struct {
	// Calls is how many calls group commit put in the transaction (1 for
	// Update).
	Calls    int
	Duration time.Duration // the whole transaction, functions included
	// Write is bbolt's time writing pages and fsyncing (0 on other
	// backends).
	Write time.Duration
	Err   bool // the transaction failed and was rolled back
}

// Sweep is one record kind in one retention sweep.
type Sweep struct {
	Kind     string
	Deleted  int
	Examined int
	Batches  int
	Duration time.Duration
	DryRun   bool
	Err      bool
}

// Intent is a side-effect intent entering a state.
type Intent struct {
	Kind  string // the intent's kind ("charge")
	State string // pending, unknown, succeeded, failed, needs_attention
}

// ProviderCall is one call to a side-effect provider.
type ProviderCall struct {
	Kind     string
	Op       string // "do" or "status"
	Outcome  string // succeeded, failed, unknown, error
	Duration time.Duration
}

// Publish is one attempt to publish an outbox event.
type Publish struct {
	Topic    string
	Err      bool
	Duration time.Duration
	// Quarantined is set when this failure put the event aside.
	Quarantined bool
}

// OutboxLag is the relay's backlog at one pass.
type OutboxLag struct {
	Pending     int
	OldestAge   time.Duration // age of the oldest unpublished event (0 when none)
	Quarantined int
	Damaged     int // pending events that do not decode: never published, until dropped
}

// Message is one message handled by the inbox.
type Message struct {
	Consumer  string
	Duplicate bool
}

// Start opens a span through o.Span, or returns ctx and a no-op when o or
// o.Span is nil. Callers that build attributes should check Tracing first
// so that an unset observer allocates nothing.
func (o *Observer) Start(ctx context.Context, name string, attrs ...Attr) (context.Context, func(error)) {
	if o == nil || o.Span == nil {
		return ctx, noEnd
	}
	return o.Span(ctx, name, attrs...)
}

// Tracing reports whether o opens spans.
func (o *Observer) Tracing() bool { return o != nil && o.Span != nil }

func noEnd(error) {}

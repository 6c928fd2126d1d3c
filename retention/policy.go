package retention

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
)

// Kind is a kind of record with a retention. The names are those of the
// sweepers registered with kv.RegisterSweeper.
type Kind string

// Record kinds.
const (
	// Idempotency records; the scope is the ledger scope ("tenant|POST /v1/orders").
	Idempotency Kind = "idempotency"
	// Inbox message IDs; the scope is the consumer name.
	Inbox Kind = "inbox"
	// PublishedEvents are outbox rows already published; the scope is the topic.
	PublishedEvents Kind = "outbox.published"
	// FinishedIntents are succeeded or failed intents; the scope is the intent kind.
	FinishedIntents Kind = "intent"
)

// Forever is a retention that never expires.
const Forever time.Duration = -1

// Max is the longest retention (and lease, and delay) any oncekv
// configuration accepts: 100 years. Times are stored as int64 Unix
// nanoseconds, which end in 2262; a longer duration would wrap round into
// the past. Use Forever to keep records for good.
const Max = keyspace.MaxRetention

// Default retentions, used when a Policy field is zero. Intents parked as
// needs_attention, pending intents, unpublished events and quarantined
// events have no retention at all: they stay until resolved.
const (
	DefaultIdempotency     = keyspace.DefaultIdempotency
	DefaultInbox           = keyspace.DefaultInbox
	DefaultPublishedEvents = keyspace.DefaultPublishedEvents
	DefaultFinishedIntents = keyspace.DefaultFinishedIntents
)

// Policy says how long each kind of record is kept, optionally per scope
// prefix. How long a key is kept is a business decision: a retry that
// arrives after its record is gone runs again.
type Policy struct {
	Idempotency     time.Duration // after completion; 0 means DefaultIdempotency
	Inbox           time.Duration // after processing; 0 means DefaultInbox
	PublishedEvents time.Duration // after publishing; 0 means DefaultPublishedEvents
	FinishedIntents time.Duration // after finishing; 0 means DefaultFinishedIntents
	// Overrides set the retention of records whose scope starts with
	// ScopePrefix; the longest matching prefix wins.
	Overrides []Override
}

// Override is a per-scope retention.
type Override struct {
	Kind        Kind
	ScopePrefix string
	Retention   time.Duration // Forever to keep
}

func (p Policy) base(k Kind) time.Duration {
	pick := func(v, def time.Duration) time.Duration {
		if v == 0 {
			return def
		}
		return v
	}
	switch k {
	case Idempotency:
		return pick(p.Idempotency, DefaultIdempotency)
	case Inbox:
		return pick(p.Inbox, DefaultInbox)
	case PublishedEvents:
		return pick(p.PublishedEvents, DefaultPublishedEvents)
	case FinishedIntents:
		return pick(p.FinishedIntents, DefaultFinishedIntents)
	}
	return 0
}

// For returns the retention of a record of kind k in scope (Forever for
// records kept for good).
func (p Policy) For(k Kind, scope string) time.Duration {
	d, best := p.base(k), -1
	for _, o := range p.Overrides {
		if o.Kind == k && strings.HasPrefix(scope, o.ScopePrefix) && len(o.ScopePrefix) > best {
			d, best = o.Retention, len(o.ScopePrefix)
		}
	}
	return d
}

// Func returns For(k, ·), in the shape the writers take: pass it as
// ledger.Config.RetentionFor (Idempotency), inbox.Config.RetentionFor
// (Inbox), outbox.RelayConfig.RetentionFor (PublishedEvents) or
// sideeffect.Config.FinishedRetentionFor (FinishedIntents).
func (p Policy) Func(k Kind) func(scope string) time.Duration {
	return func(scope string) time.Duration { return p.For(k, scope) }
}

// Constraints are what a policy must respect.
type Constraints struct {
	// Lease is the ledger's claim lease: an idempotency record must outlive it.
	Lease time.Duration
	// ClientRetryHorizon is how long clients keep retrying one operation
	// (their retry deadline): an idempotency record must outlive it, or a
	// late retry runs again.
	ClientRetryHorizon time.Duration
	// RedeliveryHorizon is how long after a first delivery the broker may
	// redeliver a message: inbox IDs must outlive it.
	RedeliveryHorizon time.Duration
}

// ErrInvalidPolicy wraps every policy problem.
var ErrInvalidPolicy = errors.New("retention: invalid policy")

// Validate checks p against c and returns every problem, each saying why.
func (p Policy) Validate(c Constraints) error {
	var errs []error
	check := func(k Kind, scope string, d time.Duration) {
		where := string(k)
		if scope != "" {
			where += fmt.Sprintf(" (scope prefix %q)", scope)
		}
		switch {
		case d == Forever:
		case d > keyspace.MaxRetention:
			errs = append(errs, fmt.Errorf("%w: %s retention %s exceeds 100 years: stored expiry times would wrap round (use retention.Forever to keep records)", ErrInvalidPolicy, where, d))
		case d < 0:
			errs = append(errs, fmt.Errorf("%w: %s retention %s is negative (use retention.Forever to keep records)", ErrInvalidPolicy, where, d))
		case k == Idempotency && d < c.Lease:
			errs = append(errs, fmt.Errorf("%w: %s retention %s is shorter than the lease %s: a record could vanish while its claim is live", ErrInvalidPolicy, where, d, c.Lease))
		case k == Idempotency && d < c.ClientRetryHorizon:
			errs = append(errs, fmt.Errorf("%w: %s retention %s is shorter than the client retry horizon %s: a retry arriving after the record is gone would run again", ErrInvalidPolicy, where, d, c.ClientRetryHorizon))
		case k == Inbox && d < c.RedeliveryHorizon:
			errs = append(errs, fmt.Errorf("%w: %s retention %s is shorter than the broker's redelivery horizon %s: a late redelivery would be applied twice", ErrInvalidPolicy, where, d, c.RedeliveryHorizon))
		}
	}
	for _, k := range []Kind{Idempotency, Inbox, PublishedEvents, FinishedIntents} {
		check(k, "", p.base(k))
	}
	for _, o := range p.Overrides {
		switch o.Kind {
		case Idempotency, Inbox, PublishedEvents, FinishedIntents:
			check(o.Kind, o.ScopePrefix, o.Retention)
		default:
			errs = append(errs, fmt.Errorf("%w: override for unknown kind %q", ErrInvalidPolicy, o.Kind))
		}
	}
	return errors.Join(errs...)
}

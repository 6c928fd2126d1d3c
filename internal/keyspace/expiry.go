package keyspace

import (
	"time"
)

// ExpiryAt returns t + retention, or Never when retention is negative or
// when t + retention would fall after Never (a retention past the time
// encoding, from a per-scope function the configuration could not check).
func ExpiryAt(t time.Time, retention time.Duration) time.Time {
	if retention < 0 || retention > MaxRetention {
		return Never
	}
	if e := t.Add(retention); e.Before(Never) {
		return e
	}
	return Never
}

// Never is the expiry of a record whose retention is unlimited: far in the
// future but inside the range of the time encoding (int64 Unix
// nanoseconds). Every expiry later than Never is stored as Never, so a
// record is either kept for a bounded time or forever, never wrapped round
// into the past.
var Never = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxRetention is the longest retention, lease or delay a configuration may
// name (100 years). Times are stored as int64 Unix nanoseconds, which end in
// 2262: a longer duration added to now would wrap round into the past and
// make a record expired at once (issue 13). Configurations reject anything
// longer; a negative retention (retention.Forever) keeps records for good.
const MaxRetention = 100 * 365 * 24 * time.Hour

// The default retentions of the record kinds, declared once: the writers
// (ledger, inbox, outbox, sideeffect) and retention.Policy both name them.
const (
	DefaultIdempotency     = 24 * time.Hour
	DefaultInbox           = 7 * 24 * time.Hour
	DefaultPublishedEvents = time.Hour
	DefaultFinishedIntents = 30 * 24 * time.Hour
)

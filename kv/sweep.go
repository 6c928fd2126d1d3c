package kv

import (
	"sort"
	"sync"
	"time"
)

// Never is the expiry of a record whose retention is unlimited: far in the
// future but inside the range of a TimeIndex key (Unix nanoseconds). Every
// expiry later than Never is stored as Never, so a record is either kept for
// a bounded time or forever, never wrapped round into the past.
var Never = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxRetention is the longest retention, lease or delay a configuration may
// name (100 years). Times are stored as int64 Unix nanoseconds, which end in
// 2262: a longer duration added to now would wrap round into the past and
// make a record expired at once (issue 13). Configurations reject anything
// longer; use a negative retention (retention.Forever) to keep records for
// good.
const MaxRetention = 100 * 365 * 24 * time.Hour

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

// Sweeper removes one kind of expired record. Each package that stores
// records with a retention registers one; the retention package drives
// them.
type Sweeper interface {
	// Index is the kind's expiry index: entries at each record's expiry time.
	Index() TimeIndex
	// Expire looks at the record behind the index entry (at, key), which is
	// due at now, re-checks its state, and — unless dryRun — deletes the
	// record and the entry if it may go. When it keeps the record it says
	// why ("live lease", "pending"). It must only touch this one record.
	Expire(tx Tx, at time.Time, key []byte, now time.Time, dryRun bool) (deleted bool, kept string, err error)
}

var (
	sweepersMu sync.Mutex
	sweepers   = map[string]Sweeper{}
)

// RegisterSweeper adds the sweeper of a record kind. Packages call it from
// init; registering a name twice panics.
func RegisterSweeper(kind string, s Sweeper) {
	sweepersMu.Lock()
	defer sweepersMu.Unlock()
	if _, dup := sweepers[kind]; dup {
		panic("kv: sweeper registered twice: " + kind)
	}
	sweepers[kind] = s
}

// Sweepers returns the registered sweepers' kinds in order, and the sweepers.
func Sweepers() ([]string, map[string]Sweeper) {
	sweepersMu.Lock()
	defer sweepersMu.Unlock()
	names := make([]string, 0, len(sweepers))
	out := make(map[string]Sweeper, len(sweepers))
	for n, s := range sweepers {
		names = append(names, n)
		out[n] = s
	}
	sort.Strings(names)
	return names, out
}

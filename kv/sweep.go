package kv

import (
	"sort"
	"sync"
	"time"
)

// Never is the expiry of a record whose retention is unlimited: far in the
// future but inside the range of a TimeIndex key (Unix nanoseconds).
var Never = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// ExpiryAt returns t + retention, or Never when retention is negative.
func ExpiryAt(t time.Time, retention time.Duration) time.Time {
	if retention < 0 {
		return Never
	}
	return t.Add(retention)
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

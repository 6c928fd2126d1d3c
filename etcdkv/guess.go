package etcdkv

import (
	"sync"
	"sync/atomic"
)

// A write transaction's first attempt may guess what a prefetch would
// read instead of reading it (doc.go, "Guessing instead of reading"): the
// value this process last wrote or read under a key (memo), or absent for
// a key the caller marked kv.BucketKey.Absent. Its commit compares every
// guess like any read, and on a conflict reads back, in the same Txn, what
// the guesses should have been, for the next attempt's. An attempt that
// guessed and did not commit (its function failed, or wrote nothing)
// decided on values nothing has confirmed: it is void, and the function
// runs again reading for real.

// memoMaxBytes bounds the memo's keys and values together, and
// memoMaxValue a value it keeps: a record's answer may be large, and the
// guesses that pay are small keys written often (usage counters, bucket
// markers) and the records a process just wrote.
const (
	memoMaxBytes = 4 << 20
	memoMaxValue = 8 << 10
)

// memo is what this process last saw under keys: written by its commits,
// read by its prefetches. An entry may be stale (another process wrote
// since): a guess from it only costs a conflict.
type memo struct {
	mu    sync.Mutex
	m     map[string]seen
	bytes int
}

// seen is a key's value and mod revision (0: absent), as observed at
// store revision at.
type seen struct {
	read
	at int64
}

func (m *memo) get(k string) (read, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[k]
	return s.read, ok
}

// set remembers r under k, observed at revision at, unless what the memo
// holds was observed later. A value too large to keep removes the entry.
func (m *memo) set(k string, r read, at int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, had := m.m[k]
	if had && old.at > at {
		return
	}
	if had {
		m.bytes -= len(k) + len(old.val)
		delete(m.m, k)
	}
	if len(r.val) > memoMaxValue {
		return
	}
	if m.m == nil {
		m.m = map[string]seen{}
	}
	if m.bytes+len(k)+len(r.val) > memoMaxBytes {
		// Full: forget a quarter, at random (a map's order), so that the
		// keys used most are likely kept; only guesses are lost.
		for ek, e := range m.m {
			if m.bytes <= memoMaxBytes*3/4 {
				break
			}
			m.bytes -= len(ek) + len(e.val)
			delete(m.m, ek)
		}
	}
	m.m[k] = seen{read: read{val: r.val, modRev: r.modRev}, at: at}
	m.bytes += len(k) + len(r.val)
}

// guessGate stops guessing for a while where guesses keep failing
// (another replica keeps writing what this process remembers, or most
// requests are retries another replica saw first): a refused commit is
// dearer than the read a guess saves. It keeps a moving average of the
// refused share of first attempts that guessed (each new one weighs a
// sixteenth); past a half, the next 16 transactions do not guess, and each
// pause that follows another without the share falling under a quarter
// in between is twice as long, up to 1,024. Refusals that concurrency
// makes anyway (two transactions of the process writing one key: a
// usage counter) are not counted: a transaction that read would have met
// them too (tx.remember tells them apart).
type guessGate struct {
	mu      sync.Mutex
	refused float64 // the moving average of the refused share
	skip    int     // transactions left in the pause
	pauses  int     // pauses in a row
}

// allow reports whether the next transaction may guess, counting in
// paused one that may not.
func (g *guessGate) allow(paused *atomic.Uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.skip > 0 {
		g.skip--
		paused.Add(1)
		return false
	}
	return true
}

// fared records how a first attempt that guessed fared.
func (g *guessGate) fared(refused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	x := 0.0
	if refused {
		x = 1
	}
	g.refused += (x - g.refused) / 16
	switch {
	case g.refused > 0.5:
		g.skip = 16 << min(g.pauses, 6)
		g.pauses++
		g.refused = 0.375 // after the pause, four refusals in a row pause it again
	case g.refused < 0.25:
		g.pauses = 0
	}
}

// GuessStats counts, since the backend was made, how the first attempts
// of its write transactions fared with their guesses (doc.go, "Guessing
// instead of reading"): whether guessing pays for a workload, which
// Options.NoGuessing would switch off.
type GuessStats struct {
	// Guessed counts the first attempts that guessed at least one key.
	// Of them, Committed committed; Refused had their commit refused
	// because a guess was stale (another process had written the key, or
	// it was marked absent and existed: the second attempt ran on what the
	// refusal read back); Conflicted had their commit refused for a
	// conflict that reading would have met too (another transaction of
	// this process wrote a key guessed, or a key read changed); Void ended
	// without a commit (an error, nothing to write: it ran again, reading
	// for real).
	Guessed    uint64 `json:"guessed"`
	Committed  uint64 `json:"committed"`
	Refused    uint64 `json:"refused"`
	Conflicted uint64 `json:"conflicted"`
	Void       uint64 `json:"void"`
	// Paused counts the transactions that did not guess because guesses
	// kept failing.
	Paused uint64 `json:"paused"`
}

// GuessStats returns the counts of the backend's guesses so far (the
// Guesses of Stats).
func (b *Backend) GuessStats() GuessStats { return b.Stats().Guesses }

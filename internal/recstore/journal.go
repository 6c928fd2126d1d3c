package recstore

import (
	"context"
	"sync"
)

// Journal remembers the directory entries one managed call added, so that
// the entries of a run that did not commit can be removed: group commit
// re-runs a call's function when another call of its batch fails, and each
// run adds its own entries. The managed form makes a Journal, passes it down
// in the context (WithJournal), calls Undo at the start of every run and
// after a failed call, leaves the entries of the run that committed, and
// then calls Committed, which adds the entries written to the cache of
// recent entries.
//
// The Tx forms, run in a caller's own transaction, have no Journal: if the
// caller rolls back, its entries stay in the directory as stale hints
// (harmless, since every hit is verified) until the next write of the store
// removes them (logStore.settleHints).
type Journal struct {
	mu      sync.Mutex
	entries []journaled
	// recent holds the entries to add to the cache of recent entries once
	// the call's transaction has committed (Committed): the caller's
	// goroutine adds them, not the group commit's leader, which would
	// delay the next batch by the time it takes to add a whole batch's.
	recent []pendingEntry
	// The first entry of each list is stored in the journal itself: a
	// managed call usually writes one record, and then its journal costs
	// one allocation, not three.
	entry0  [1]journaled
	recent0 [1]pendingEntry
}

type pendingEntry struct {
	d           *directory
	h, pos, gen uint64
	entry       []byte
}

type journaled struct {
	d   *directory
	h   uint64
	pos uint64
}

type journalKey struct{}

// WithJournal returns ctx carrying j.
func WithJournal(ctx context.Context, j *Journal) context.Context {
	return context.WithValue(ctx, journalKey{}, j)
}

func journalFrom(ctx context.Context) *Journal {
	if ctx == nil {
		return nil
	}
	j, _ := ctx.Value(journalKey{}).(*Journal)
	return j
}

func (j *Journal) note(d *directory, h, pos uint64) {
	if j == nil {
		return
	}
	j.mu.Lock()
	if j.entries == nil {
		j.entries = j.entry0[:0]
	}
	j.entries = append(j.entries, journaled{d, h, pos})
	j.mu.Unlock()
}

// Undo removes every entry noted since the last Undo. The positions were
// never committed and are never reused, so removing them is safe at any
// time.
func (j *Journal) Undo() {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.entries {
		e.d.remove(e.h, e.pos)
	}
	j.entries = j.entries[:0]
	clear(j.recent)
	j.recent = j.recent[:0]
}

// remember notes an entry to cache once the call commits.
func (j *Journal) remember(d *directory, h, pos, gen uint64, entry []byte) {
	j.mu.Lock()
	if j.recent == nil {
		j.recent = j.recent0[:0]
	}
	j.recent = append(j.recent, pendingEntry{d, h, pos, gen, entry})
	j.mu.Unlock()
}

// Committed is called once the call's transaction has committed: the
// entries it wrote join the cache of recent entries (each only if its
// position has not changed since, see recent.go). A managed call that
// does not call it only loses the cache's help.
func (j *Journal) Committed() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range j.recent {
		e.d.remember(e.h, e.pos, e.gen, e.entry)
	}
	clear(j.recent)
	j.recent = j.recent[:0]
}

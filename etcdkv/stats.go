package etcdkv

import (
	"sync/atomic"

	"github.com/oncekv/oncekv/kv"
)

// Stats counts, since the backend was made, what its transactions met on
// the way to etcd: how often optimistic commits lose (Conflicts, and
// Exhausted when they keep losing), how often etcd was briefly out of
// reach (Retried, AnswersLost), and how the guesses fared. A conflict rate
// that climbs says that replicas or goroutines write the same keys (one
// tenant's records from many replicas, a hot business row); lost answers
// say that the network or etcd's leader is in trouble. kv.DB.Counters
// returns the same counts, and the OpenTelemetry adapter (otel.ObserveLedger)
// exports them as oncekv.etcd.*.
type Stats struct {
	// Updates counts the write transactions run (Update, and the DB's
	// Batch, which is an Update here).
	Updates uint64 `json:"updates"`
	// Conflicts counts the attempts whose commit etcd refused because a
	// key they read had changed since, or a guess was stale: each ran
	// again (unless the transaction was out of attempts).
	Conflicts uint64 `json:"conflicts"`
	// Exhausted counts the transactions that returned ErrConflict, their
	// Options.MaxAttempts attempts all refused.
	Exhausted uint64 `json:"exhausted"`
	// Solo counts the transactions that, refused Options.SoloAfter times,
	// ran their later attempts alone within the process.
	Solo uint64 `json:"solo"`
	// Retried counts the attempts, of reads (View) and writes, run again
	// after a failure worth another: the read revision compacted away, or
	// etcd out of reach before anything was sent.
	Retried uint64 `json:"retried"`
	// AnswersLost counts the commits sent whose answer did not come back
	// (a timeout, a connection cut): each was settled by its commit marker
	// (applied, or fenced so that it never applies), except Unknown of
	// them.
	AnswersLost uint64 `json:"answers_lost"`
	// Unknown counts the commits whose answer was lost and that could not
	// be settled (etcd out of reach, or the backend closed, meanwhile):
	// their callers got kv.ErrCommitUnknown, which the middleware answers
	// with 503 and Retry-After.
	Unknown uint64 `json:"unknown"`
	// Guesses counts how the first attempts fared with their guesses
	// (GuessStats).
	Guesses GuessStats `json:"guesses"`
}

type stats struct {
	updates, conflicts, exhausted, solo, retried, answersLost, unknown atomic.Uint64
	guessed, committed, refused, conflicted, void, paused              atomic.Uint64
}

// Stats returns the backend's counts so far.
func (b *Backend) Stats() Stats {
	s := &b.stats
	return Stats{Updates: s.updates.Load(), Conflicts: s.conflicts.Load(), Exhausted: s.exhausted.Load(),
		Solo: s.solo.Load(), Retried: s.retried.Load(), AnswersLost: s.answersLost.Load(), Unknown: s.unknown.Load(),
		Guesses: GuessStats{Guessed: s.guessed.Load(), Committed: s.committed.Load(), Refused: s.refused.Load(),
			Conflicted: s.conflicted.Load(), Void: s.void.Load(), Paused: s.paused.Load()}}
}

// Counters returns Stats as kv.Counters (kv.DB.Counters), for metrics
// adapters that do not import this package.
func (b *Backend) Counters() []kv.Counter {
	s := b.Stats()
	g := s.Guesses
	return []kv.Counter{
		{Name: "updates", Unit: "{transaction}", Description: "Write transactions run.", Value: s.Updates},
		{Name: "conflicts", Unit: "{attempt}", Description: "Attempts whose commit etcd refused because a key read had changed, or a guess was stale; each runs again.", Value: s.Conflicts},
		{Name: "exhausted", Unit: "{transaction}", Description: "Transactions that returned ErrConflict, every attempt refused.", Value: s.Exhausted},
		{Name: "solo", Unit: "{transaction}", Description: "Transactions that kept conflicting and ran their later attempts alone within the process.", Value: s.Solo},
		{Name: "retried", Unit: "{attempt}", Description: "Attempts run again after etcd was briefly out of reach, or the read revision was compacted.", Value: s.Retried},
		{Name: "answers_lost", Unit: "{commit}", Description: "Commits sent whose answer did not come back, settled by their marker.", Value: s.AnswersLost},
		{Name: "unknown", Unit: "{commit}", Description: "Commits whose answer was lost and that could not be settled: kv.ErrCommitUnknown.", Value: s.Unknown},
		{Name: "guesses", Unit: "{transaction}", Description: "First attempts that guessed keys instead of reading them.", Value: g.Guessed},
		{Name: "guesses.committed", Unit: "{transaction}", Description: "First attempts that guessed and committed.", Value: g.Committed},
		{Name: "guesses.refused", Unit: "{transaction}", Description: "First attempts refused because a guess was stale.", Value: g.Refused},
		{Name: "guesses.conflicted", Unit: "{transaction}", Description: "First attempts that guessed and were refused for a conflict reading would have met too.", Value: g.Conflicted},
		{Name: "guesses.void", Unit: "{transaction}", Description: "First attempts that guessed and ended without a commit, run again reading.", Value: g.Void},
		{Name: "guesses.paused", Unit: "{transaction}", Description: "Transactions that did not guess because guesses kept failing.", Value: g.Paused},
	}
}

var _ kv.Counting = (*Backend)(nil)

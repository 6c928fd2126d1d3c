package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/observe"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/loop"
)

// Defaults of Config.
const (
	DefaultBatchSize = 1000
	DefaultMaxTxTime = 50 * time.Millisecond
	DefaultPause     = time.Millisecond
)

// Config configures a sweep. A nil *Config means defaults.
type Config struct {
	// BatchSize bounds the records removed per write transaction. 0 (or
	// less) means DefaultBatchSize.
	BatchSize int
	// MaxTxTime is a time budget per write transaction, counted from its
	// start (not from the wait for the writer before it): a batch stops
	// early once it is spent, so request transactions are not stalled. 0
	// (or less) means DefaultMaxTxTime.
	MaxTxTime time.Duration
	// Pause is how long the sweep yields the writer between batches. 0
	// means DefaultPause; a negative Pause, none.
	Pause time.Duration
	// DryRun re-checks and counts what would be removed, removing nothing.
	DryRun bool
	// Logger, when set, is where Run logs a sweep that panicked (an
	// observer's panic, say), with its stack; the sweep's error, passed to
	// onSweep, has the panic's value only. nil logs nothing.
	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	var r Config
	if c != nil {
		r = *c
	}
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.MaxTxTime <= 0 {
		r.MaxTxTime = DefaultMaxTxTime
	}
	if r.Pause < 0 {
		r.Pause = 0
	} else if r.Pause == 0 {
		r.Pause = DefaultPause
	}
	return r
}

// KindStats reports the sweep of one kind.
type KindStats struct {
	Examined  int            // expired index entries looked at
	Deleted   int            // records removed (or, in a dry run, removable)
	Skipped   map[string]int // records kept, by reason ("live lease", "pending", ...)
	Batches   int            // write transactions
	LongestTx time.Duration  // the longest of them
}

// Stats reports a sweep.
type Stats struct {
	Kinds    map[Kind]*KindStats
	Duration time.Duration
	DryRun   bool
}

// Deleted sums the records removed across kinds.
func (s Stats) Deleted() int {
	n := 0
	for _, k := range s.Kinds {
		n += k.Deleted
	}
	return n
}

// LongestTx is the longest write transaction of the sweep.
func (s Stats) LongestTx() time.Duration {
	var d time.Duration
	for _, k := range s.Kinds {
		d = max(d, k.LongestTx)
	}
	return d
}

// Sweep removes every record of every kind that is past its retention, in
// bounded batches: it reads a batch of due entries from the kind's expiry
// index (so its cost follows what has expired, not the size of the
// database), then removes them in one short write transaction, re-checking
// each record's state first (an in-progress record with a live lease, a
// pending intent or an unpublished event is never removed), and yields
// between batches. It stops cleanly when ctx ends, returning what it did.
//
// The kinds to sweep are passed explicitly: ledger.RecordKind,
// inbox.RecordKind, outbox.RecordKind, sideeffect.RecordKind (or
// inspect.RecordKinds for all of them).
func Sweep(ctx context.Context, db *kv.DB, cfg *Config, kinds ...kv.RecordKind) (Stats, error) {
	c := cfg.withDefaults()
	start := time.Now()
	st := Stats{Kinds: map[Kind]*KindStats{}, DryRun: c.DryRun}
	if len(kinds) == 0 {
		return st, errNoKinds
	}
	o := db.Observer()
	for _, k := range kinds {
		ks := &KindStats{Skipped: map[string]int{}}
		st.Kinds[Kind(k.Name())] = ks
		kstart := time.Now()
		err := sweepKind(ctx, db, k, c, ks)
		if o != nil && o.Sweep != nil {
			o.Sweep(observe.Sweep{Kind: k.Name(), Deleted: ks.Deleted, Examined: ks.Examined, Batches: ks.Batches,
				Duration: time.Since(kstart), DryRun: c.DryRun, Err: err != nil})
		}
		if err != nil {
			st.Duration = time.Since(start)
			return st, err
		}
	}
	st.Duration = time.Since(start)
	return st, recordLast(context.WithoutCancel(ctx), db, st)
}

func sweepKind(ctx context.Context, db *kv.DB, k kv.RecordKind, c Config, ks *KindStats) error {
	// Stay below the backend's limit on writes per transaction (etcd:
	// 128): a record, its index entry and its counters.
	c.BatchSize = db.Traits().Fit(c.BatchSize, 4)
	var after []byte
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := db.Clock().Now()
		var entries []kv.Due
		// Collect the keys first, then delete in a separate transaction:
		// never delete under a live cursor.
		if err := db.View(ctx, func(tx kv.Tx) error {
			entries = k.Due(tx, now, after, c.BatchSize)
			return nil
		}); err != nil {
			return err
		}
		if len(entries) == 0 {
			return nil
		}
		var deleted, processed int
		skipped := map[string]int{}
		var begin time.Time
		txn := db.Update
		if c.DryRun {
			txn = db.View // a dry run writes nothing, and works on a read-only file
		}
		err := txn(ctx, func(tx kv.Tx) error {
			// The budget starts with the transaction, not with the wait
			// for the writer before it: a sweep that queued behind a long
			// write went on one record a transaction.
			begin = time.Now()
			deleted, processed = 0, 0
			clear(skipped)
			for _, e := range entries {
				if processed > 0 && time.Since(begin) > c.MaxTxTime {
					break
				}
				ok, kept, err := k.Expire(tx, e, now, c.DryRun)
				if err != nil {
					return fmt.Errorf("retention: expire %q: %w", e.Key, err)
				}
				processed++
				if ok {
					deleted++
				} else {
					skipped[kept]++
				}
			}
			if !c.DryRun && deleted > 0 {
				failpoint.Inject(failpoint.SweepBeforeCommit)
			}
			return nil
		})
		if err == nil && !c.DryRun && deleted > 0 {
			failpoint.Inject(failpoint.SweepAfterCommit)
		}
		took := time.Since(begin)
		if err != nil {
			return err
		}
		ks.Batches++
		ks.LongestTx = max(ks.LongestTx, took)
		ks.Examined += processed
		ks.Deleted += deleted
		for r, n := range skipped {
			ks.Skipped[r] += n
		}
		after = entries[processed-1].Cursor
		if c.Pause > 0 {
			t := time.NewTimer(c.Pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// errNoKinds: a sweep of nothing is a mistake, not a quiet success.
var errNoKinds = errors.New("retention: no record kinds to sweep (pass ledger.RecordKind, inbox.RecordKind, outbox.RecordKind, sideeffect.RecordKind)")

// Run sweeps the given kinds every interval until ctx ends, passing each
// sweep's stats to onSweep (for metrics; may be nil). It returns ctx.Err(),
// or, as soon as the database refuses calls (kv.DB.Done), the refusal
// from a sweep made then: kv.ErrClosed once it is closed, an error matching
// kv.ErrSyncFailed once a commit's sync (the sweep's own, or any other
// writer's) failed after its meta page was written. A sweep
// that panics is that sweep's error (logged with its stack through
// cfg.Logger), and the next comes an interval later.
func Run(ctx context.Context, db *kv.DB, cfg *Config, interval time.Duration, onSweep func(Stats, error), kinds ...kv.RecordKind) error {
	if interval <= 0 {
		return fmt.Errorf("retention: interval %s must be positive", interval)
	}
	if len(kinds) == 0 {
		return errNoKinds
	}
	return loop.Run(ctx, nil, func(ctx context.Context) (Stats, time.Duration, error) {
		st, err := Sweep(ctx, db, cfg, kinds...)
		return st, interval, err
	}, onSweep, loop.Config{Name: "retention sweeper", Final: []error{kv.ErrClosed, kv.ErrSyncFailed, kv.ErrReadFailed}, AfterPanic: interval, Logger: cfg.withDefaults().Logger, Refusing: db.Done()})
}

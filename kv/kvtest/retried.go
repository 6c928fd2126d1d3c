package kvtest

import (
	"context"
	"errors"

	"github.com/oncekv/oncekv/kv"
)

// RetriedViews wraps b so that every View runs fn twice, each run in a
// read transaction of its own, and returns what the second returns: what
// a backend with several writers (etcd) does when a read fails part way
// through fn in a way worth another attempt (a leader change, the read
// revision compacted away under a long scan). A View function that keeps
// what a first run gathered (appends to a slice declared outside it,
// counts into a field) shows it under this wrapper: its caller sees the
// entries twice.
func RetriedViews(b kv.Backend) kv.Backend { return retriedViews{b} }

// RetriedTxs is RetriedViews for writes too: every Update runs fn once in
// a transaction it rolls back, then again in one it commits, as a backend
// with several writers does after an optimistic conflict. A run whose fn
// fails is not run again, as on etcd: its error is the Update's. A function that
// changes what it captured (a counter, a struct it was handed) shows it:
// the second run starts from the first run's changes.
func RetriedTxs(b kv.Backend) kv.Backend { return retriedTxs{retriedViews{b}} }

type retriedViews struct{ kv.Backend }

func (b retriedViews) View(ctx context.Context, fn func(kv.Tx) error) error {
	_ = b.Backend.View(ctx, fn) // the attempt whose read failed: its result is void
	return b.Backend.View(ctx, fn)
}

// Traits are b's, without group commit: each Update runs on its own.
func (b retriedViews) Traits() kv.Traits {
	t := b.Backend.Traits()
	t.GroupCommit = false
	return t
}

type retriedTxs struct{ retriedViews }

// errFirstRun rolls back RetriedTxs' first run.
var errFirstRun = errors.New("kvtest: the first run, rolled back")

func (b retriedTxs) Update(ctx context.Context, fn func(kv.Tx) error) error {
	err := b.Backend.Update(ctx, func(tx kv.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errFirstRun
	})
	if !errors.Is(err, errFirstRun) {
		return err // fn failed (or the store did): not a conflict, not run again
	}
	return b.Backend.Update(ctx, fn)
}

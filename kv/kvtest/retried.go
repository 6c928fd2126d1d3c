package kvtest

import (
	"context"

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

type retriedViews struct{ kv.Backend }

func (b retriedViews) View(ctx context.Context, fn func(kv.Tx) error) error {
	_ = b.Backend.View(ctx, fn) // the attempt whose read failed: its result is void
	return b.Backend.View(ctx, fn)
}

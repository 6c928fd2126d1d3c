package kvtest

import (
	"context"
	"sync/atomic"

	"github.com/oncekv/oncekv/kv"
)

// CountingBackend is a backend over a DB (a bbolt file) that keeps a
// count of its own (kv.Counting), as etcdkv's backend keeps its conflicts
// and lost answers: "updates", the write transactions it ran. Its name
// (kv.Traits.Name) is "counting". It stands in for such a backend where
// what is tested is what shows the counts (a metrics adapter, inspect's
// Stats and console), not the backend.
type CountingBackend struct {
	*kv.DB
	updates atomic.Uint64
}

// Counting returns a CountingBackend over db; kv.New makes a DB of it.
func Counting(db *kv.DB) *CountingBackend { return &CountingBackend{DB: db} }

// Update counts the transaction and runs it on the DB.
func (b *CountingBackend) Update(ctx context.Context, fn func(kv.Tx) error) error {
	b.updates.Add(1)
	return b.DB.Update(ctx, fn)
}

// Traits are the DB's, named "counting".
func (b *CountingBackend) Traits() kv.Traits {
	tr := b.DB.Traits()
	tr.Name = "counting"
	return tr
}

// Updates returns the write transactions run so far.
func (b *CountingBackend) Updates() uint64 { return b.updates.Load() }

// Counters returns the count: "updates".
func (b *CountingBackend) Counters() []kv.Counter {
	return []kv.Counter{{Name: "updates", Unit: "{transaction}", Description: "Write transactions run.", Value: b.updates.Load()}}
}

var _ kv.Counting = (*CountingBackend)(nil)

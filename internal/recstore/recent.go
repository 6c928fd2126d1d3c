package recstore

import (
	"sync"
	"sync/atomic"
)

// The recent-entries cache keeps, per directory shard, the log entries
// this process committed most recently, so that a retry (which comes
// seconds after the request it repeats, not days) is answered from memory:
// a directory probe, a map look-up, no read transaction. Older records are
// read from the log as before.
//
// It must never answer with an entry the log no longer holds at that
// position. Three rules make it so:
//
//   - An entry is added only after the transaction that wrote it commits
//     (a managed call adds it from its own goroutine when it returns,
//     through its Journal; a Tx form in a caller's transaction through
//     OnCommit): a rolled-back write, a batch run that failed, a caller's
//     own transaction rolled back never reach it.
//   - Every change of a position (overwrite, move, delete, sweep, rekey)
//     removes the position inside the changing transaction, before its
//     commit, and counts a generation of the shard. Until that commit, a
//     reader that misses the cache reads the log, where the old value is
//     still the committed one.
//   - bbolt runs OnCommit after it releases the writer lock (and a
//     managed call returns later still), so a later transaction may
//     change the position between a commit and the entry's addition. The
//     writer therefore takes the shard's generation inside its
//     transaction, and the entry is added only if no change in the shard
//     came in between.
//
// Entries are the exact bytes written (immutable once committed) and are
// still verified against the (scope, key) asked for, as a hit read from
// the log is. The cache holds what this process wrote: a process that
// opens an existing file starts with it empty, and writes made to the
// file behind oncekv's back (raw bbolt) are not seen by it.
// The cache's bound (kv.Options.RecentCacheBytes) is split evenly among
// the directory's shards; a shard evicts its oldest entries first, and an
// entry over a quarter of a shard's bound is not kept (a huge response
// would evict a shard's worth of small ones). A bound of 0 turns the cache
// off: nothing is remembered, and the write path skips the shard's lock.

// setRecentBytes sets the cache's bound for the whole directory; 0 turns
// it off. It is set once, before the directory is used.
func (d *directory) setRecentBytes(n int) {
	d.recentShardBytes = max(n, 0) / dirShards
	d.recentMaxEntry = d.recentShardBytes / 4
}

// recentOff reports whether the cache is off.
func (d *directory) recentOff() bool { return d.recentShardBytes == 0 }

// recentShard is one shard's cache, beside (not under) the directory's
// lock: adds come after commits, outside the writer's critical section.
type recentShard struct {
	mu  sync.RWMutex
	gen atomic.Uint64 // counts changes of cached positions
	// hits and misses count the look-ups answered from the cache, and
	// those of a key the directory holds that had to read the log.
	hits, misses atomic.Uint64
	entries      map[uint64][]byte
	// order is the positions in the order they were added, from head on;
	// it may still hold positions removed since (skipped when evicted,
	// dropped when it is compacted).
	order []uint64
	head  int
	bytes int
}

// cached returns the committed entry at pos, if the cache holds it.
func (d *directory) cached(h, pos uint64) []byte {
	r := &d.shard(h).recent
	r.mu.RLock()
	e := r.entries[pos]
	r.mu.RUnlock()
	return e
}

// generation returns the shard's change count, for remember.
func (d *directory) generation(h uint64) uint64 { return d.shard(h).recent.gen.Load() }

// remember adds the entry committed at pos, unless a position of the
// shard changed since gen was taken (inside the writing transaction).
func (d *directory) remember(h, pos, gen uint64, entry []byte) {
	if len(entry) > d.recentMaxEntry { // every entry, with the cache off (0)
		return
	}
	r := &d.shard(h).recent
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen.Load() != gen {
		return
	}
	if r.entries == nil {
		r.entries = map[uint64][]byte{}
	}
	if old, ok := r.entries[pos]; ok {
		r.bytes -= cap(old)
	}
	r.entries[pos] = entry
	r.order = append(r.order, pos)
	r.bytes += cap(entry) // what it holds: an entry encoded in a buffer allocated ahead has room to spare
	for r.bytes > d.recentShardBytes && r.head < len(r.order) {
		p := r.order[r.head]
		r.head++
		if e, ok := r.entries[p]; ok {
			delete(r.entries, p)
			r.bytes -= cap(e)
		}
	}
	r.compact()
}

// forget removes pos and counts a change, inside the transaction that
// changes it.
func (d *directory) forget(h, pos uint64) {
	if d.recentOff() {
		return // nothing cached, and nothing to refuse: remember adds nothing
	}
	r := &d.shard(h).recent
	r.mu.Lock()
	r.gen.Add(1)
	if e, ok := r.entries[pos]; ok {
		delete(r.entries, pos)
		r.bytes -= cap(e)
	}
	r.mu.Unlock()
}

// compact keeps the order within twice the entries held (plus a little):
// when evicted and removed positions make up more than that, the live
// ones are kept, oldest first, and the rest dropped.
func (r *recentShard) compact() {
	if len(r.order) <= 2*len(r.entries)+64 {
		return
	}
	out := r.order[:0]
	for _, p := range r.order[r.head:] {
		if _, ok := r.entries[p]; ok {
			out = append(out, p)
		}
	}
	r.order, r.head = out, 0
}

// recentStats returns the entries cached, their bytes, and the hits and
// misses counted.
func (d *directory) recentStats() (n, bytes int, hits, misses uint64) {
	for i := range d.shards {
		r := &d.shards[i].recent
		r.mu.RLock()
		n += len(r.entries)
		bytes += r.bytes
		r.mu.RUnlock()
		hits += r.hits.Load()
		misses += r.misses.Load()
	}
	return n, bytes, hits, misses
}

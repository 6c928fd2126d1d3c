package recstore

import (
	"hash/maphash"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/oncekv/oncekv/kv"
)

// directory maps hash(scope, key) to the log positions that may hold the
// record of (scope, key). It is authoritative for misses and a hint for
// hits: every committed record has an entry (entries are added inside the
// writing transaction, before the writer lock is released), and every hit
// is verified against the record read in the caller's transaction, so an
// entry left by a rolled-back transaction, a record swept away, a record
// that moved, or another key with the same hash is never trusted.
//
// Entries are added in the writing transaction and removed only when that
// can no longer be wrong: after the commit of the transaction that deleted
// the record (OnCommit), or after the rollback of the managed transaction
// that added them (Journal). Positions are never reused within a process,
// so removing (hash, position) then can never remove a live record's entry.
//
// The directory is split into shards by hash, each with its own lock: the
// writer adds entries while holding bbolt's writer lock, so it must not
// wait for, or wake, the many readers probing other keys at the same time.
type directory struct {
	seed maphash.Seed
	// mask is ANDed into every hash: all ones, except in tests that narrow
	// it so that most keys collide.
	mask   uint64
	shards [dirShards]dirShard
	// adds counts, per slot of hashes, the positions added: a look-up that
	// missed can tell, by its slot's count, that no position has been
	// added under its hash since (unchanged), and need not look again.
	adds [dirSlots]atomic.Uint32
	// recentShardBytes bounds each shard's cache of recent entries, and
	// recentMaxEntry the entries it keeps (recent.go); 0 when it is off.
	recentShardBytes, recentMaxEntry int
}

const (
	// dirShards is the number of shards (a power of two).
	dirShards = 64
	// dirSlots is the number of add counters (a power of two): a batch
	// adding some fifty positions changes few of them.
	dirSlots = 4096
)

type dirShard struct {
	mu sync.RWMutex
	// one holds the first position of each hash: almost every hash has
	// exactly one. more holds the rest (a record moving, a rolled-back
	// insert, a collision).
	one  map[uint64]uint64
	more map[uint64][]uint64
	// recent caches the entries of the shard's hashes committed last
	// (recent.go).
	recent recentShard
	_      [64]byte // keeps neighbouring shards' locks off one cache line
}

func newDirectory(sizeHint int) *directory {
	d := &directory{seed: maphash.MakeSeed(), mask: ^uint64(0)}
	d.setRecentBytes(kv.DefaultRecentCacheBytes)
	for i := range d.shards {
		d.shards[i].one = make(map[uint64]uint64, sizeHint/dirShards)
		d.shards[i].more = map[uint64][]uint64{}
	}
	return d
}

// shard returns the shard of hash h. The top bits choose it: the maps
// index by the low ones.
func (d *directory) shard(h uint64) *dirShard { return &d.shards[shardOf(h)] }

// shardOf returns the index of hash h's shard.
func shardOf(h uint64) int { return int(h >> (64 - 6)) }

// hash is keyed per process (maphash's random seed), so a client cannot
// choose keys that collide. Scope and key are hashed apart and mixed, so
// ("a", "bc") and ("ab", "c") differ.
func (d *directory) hash(scope, key string) uint64 {
	return (bits.RotateLeft64(maphash.String(d.seed, scope)*0x9E3779B97F4A7C15, 31) ^ maphash.String(d.seed, key)) & d.mask
}

func (d *directory) hashBytes(scope, key []byte) uint64 {
	return (bits.RotateLeft64(maphash.Bytes(d.seed, scope)*0x9E3779B97F4A7C15, 31) ^ maphash.Bytes(d.seed, key)) & d.mask
}

// candidates appends to buf the positions recorded under h, the first
// one first, and returns it. The lock is held only to copy them: the
// caller reads the log without blocking writers.
func (d *directory) candidates(h uint64, buf []uint64) []uint64 {
	sh := d.shard(h)
	sh.mu.RLock()
	if p, ok := sh.one[h]; ok {
		buf = append(buf, p)
		if more := sh.more[h]; len(more) > 0 {
			buf = append(buf, more...)
		}
	}
	sh.mu.RUnlock()
	return buf
}

// first returns the first position recorded under h, if any, whether
// there are more, and h's add count (taken before the look-up: see
// unchanged).
func (d *directory) first(h uint64) (pos uint64, extra, ok bool, adds uint32) {
	adds = d.adds[h&(dirSlots-1)].Load()
	sh := d.shard(h)
	sh.mu.RLock()
	pos, ok = sh.one[h]
	if ok && len(sh.more) > 0 {
		extra = len(sh.more[h]) > 0
	}
	sh.mu.RUnlock()
	return pos, extra, ok, adds
}

// unchanged reports that no position has been added under h (or another
// hash of its slot) since first returned adds: a miss then is still a
// miss. An add counts after its position is in the map, so a position
// that first did not see has counted by the time its add returns (inside
// its writing transaction, before the writer lock is released).
func (d *directory) unchanged(h uint64, adds uint32) bool {
	return d.adds[h&(dirSlots-1)].Load() == adds
}

// add records that pos may hold the record of hash h.
func (d *directory) add(h, pos uint64) {
	sh := d.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.put(h, pos)
	d.adds[h&(dirSlots-1)].Add(1)
}

// put records pos under h, once, in a shard whose lock the caller holds.
func (sh *dirShard) put(h, pos uint64) {
	p, ok := sh.one[h]
	switch {
	case !ok:
		sh.one[h] = pos
	case p == pos || slices.Contains(sh.more[h], pos):
	default:
		sh.more[h] = append(sh.more[h], pos)
	}
}

// hashPos is a position found under a hash, for load.
type hashPos struct{ h, pos uint64 }

// gathered holds the positions a rebuild found, by shard, in log order.
type gathered [dirShards][]hashPos

// add appends pos, found under h, to h's shard.
func (g *gathered) add(h, pos uint64) {
	i := shardOf(h)
	g[i] = append(g[i], hashPos{h, pos})
}

// reset empties every shard, keeping its room.
func (g *gathered) reset() {
	for i := range g {
		g[i] = g[i][:0]
	}
}

// load records the positions of a rebuild, gathered by shard (found[i]
// holds shard i's, in log order), as add would one at a time. Each
// shard's map is sized once for its positions instead of growing, and the
// shards are filled by up to GOMAXPROCS goroutines: at a million records
// the inserts, each a cache miss in a large map, were most of an open's
// time. It counts no adds: load runs before the directory is published,
// so no look-up is in flight to be told of them (unchanged).
func (d *directory) load(found *gathered) {
	var next atomic.Int32
	fill := func() {
		for i := int(next.Add(1) - 1); i < dirShards; i = int(next.Add(1) - 1) {
			d.shards[i].load(found[i])
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), dirShards) - 1 {
		wg.Go(fill)
	}
	fill()
	wg.Wait()
}

func (sh *dirShard) load(found []hashPos) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.one) == 0 {
		sh.one = make(map[uint64]uint64, len(found))
	}
	for _, f := range found {
		sh.put(f.h, f.pos)
	}
}

// remove forgets pos under h.
func (d *directory) remove(h, pos uint64) {
	sh := d.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rest := sh.more[h]
	if p, ok := sh.one[h]; ok && p == pos {
		if len(rest) == 0 {
			delete(sh.one, h)
			return
		}
		sh.one[h] = rest[0]
		rest = rest[1:]
	} else if i := slices.Index(rest, pos); i >= 0 {
		rest = slices.Delete(rest, i, i+1)
	} else {
		return
	}
	if len(rest) == 0 {
		delete(sh.more, h)
	} else {
		sh.more[h] = rest
	}
}

// len returns the number of positions recorded.
func (d *directory) len() (positions, extra int) {
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.RLock()
		for _, r := range sh.more {
			extra += len(r)
		}
		positions += len(sh.one)
		sh.mu.RUnlock()
	}
	return positions + extra, extra
}

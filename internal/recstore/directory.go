package recstore

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
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
type directory struct {
	seed maphash.Seed

	mu sync.RWMutex
	// one holds the first position of each hash: almost every hash has
	// exactly one. more holds the rest (a record moving, a rolled-back
	// insert, a collision).
	one  map[uint64]uint64
	more map[uint64][]uint64
}

func newDirectory(sizeHint int) *directory {
	return &directory{seed: maphash.MakeSeed(), one: make(map[uint64]uint64, sizeHint), more: map[uint64][]uint64{}}
}

// hash is keyed per process (maphash's random seed), so a client cannot
// choose keys that collide. Scope and key are hashed apart and mixed, so
// ("a", "bc") and ("ab", "c") differ.
func (d *directory) hash(scope, key string) uint64 {
	return bits.RotateLeft64(maphash.String(d.seed, scope)*0x9E3779B97F4A7C15, 31) ^ maphash.String(d.seed, key)
}

func (d *directory) hashBytes(scope, key []byte) uint64 {
	return bits.RotateLeft64(maphash.Bytes(d.seed, scope)*0x9E3779B97F4A7C15, 31) ^ maphash.Bytes(d.seed, key)
}

// candidates appends to buf the positions recorded under h, the first
// one first, and returns it. The lock is held only to copy them: the
// caller reads the log without blocking writers.
func (d *directory) candidates(h uint64, buf []uint64) []uint64 {
	d.mu.RLock()
	if p, ok := d.one[h]; ok {
		buf = append(buf, p)
		if more := d.more[h]; len(more) > 0 {
			buf = append(buf, more...)
		}
	}
	d.mu.RUnlock()
	return buf
}

// first returns the first position recorded under h, if any.
func (d *directory) first(h uint64) (uint64, bool) {
	d.mu.RLock()
	p, ok := d.one[h]
	d.mu.RUnlock()
	return p, ok
}

// add records that pos may hold the record of hash h.
func (d *directory) add(h, pos uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.one[h]
	switch {
	case !ok:
		d.one[h] = pos
	case p == pos || slices.Contains(d.more[h], pos):
	default:
		d.more[h] = append(d.more[h], pos)
	}
}

// remove forgets pos under h.
func (d *directory) remove(h, pos uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rest := d.more[h]
	if p, ok := d.one[h]; ok && p == pos {
		if len(rest) == 0 {
			delete(d.one, h)
			return
		}
		d.one[h] = rest[0]
		rest = rest[1:]
	} else if i := slices.Index(rest, pos); i >= 0 {
		rest = slices.Delete(rest, i, i+1)
	} else {
		return
	}
	if len(rest) == 0 {
		delete(d.more, h)
	} else {
		d.more[h] = rest
	}
}

// len returns the number of positions recorded.
func (d *directory) len() (positions, extra int) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	extra = 0
	for _, r := range d.more {
		extra += len(r)
	}
	return len(d.one) + extra, extra
}

package recstore

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// The tail. bbolt rewrites, at every commit, each page on the path from a
// changed leaf to its bucket's root. A record appended to the log dirties
// the log's tail leaf and its branches: three pages once the log holds some
// ten thousand records, where the whole bare business write costs five. So
// new entries go first to a second bucket, the tail, that never grows past
// one leaf: while it is small bbolt stores it inline, in the root page
// every commit rewrites anyway, and after that it costs one page. When the
// next entry would not fit in a page, the entries the tail holds move to
// the log, in the transaction that writes it, at the same positions: one
// log path written for a page of records instead of one per record.
//
// An entry lives at its position in exactly one of the two buckets, and a
// move changes no position, so the directory and the cache of recent
// entries never see it. Everything that reads the log (look-ups, Scan, the
// sweep, the check, rekeys, the rebuild) reads both through union, in
// position order.

// tailBudget returns the bytes of entries (bbolt's leaf element, key and
// value) that fit in one leaf page of a database of pageSize.
func tailBudget(pageSize int) int { return pageSize - leafHeader }

const (
	leafHeader  = 16 // bbolt's page header
	leafElement = 16 // bbolt's leaf element header
)

// inLeaf is what the entry (k, v) takes in a leaf page.
func inLeaf(k, v []byte) int { return leafElement + len(k) + len(v) }

// appendEntry puts entry at the new position pos: in the tail, after
// moving the tail's entries to the log when entry would not fit beside
// them; in the log itself when entry alone fills half a page or more (it
// would only push out the others), and when this transaction has moved
// the tail already: the log's tail path is written by this commit anyway,
// so a group commit's later entries cost no page there and no move.
func (s *logStore) appendEntry(tx kv.Tx, log kv.Bucket, pos uint64, entry []byte) error {
	key := posKey(pos)
	bt := kv.BoltTx(tx)
	if bt == nil {
		return log.Put(key, entry)
	}
	budget := s.budget
	cost := inLeaf(key, entry)
	if 2*cost >= budget || s.movedIn == bt {
		return log.Put(key, entry)
	}
	tail := bt.Bucket(s.tail.Bytes()) // CreateBucketIfNotExists would copy the name each time
	if tail == nil {
		var err error
		if tail, err = bt.CreateBucket(s.tail.Bytes()); err != nil {
			return err
		}
	}
	used := s.tailUsed
	if s.tailTx != bt {
		used = 0
		c := tail.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			used += inLeaf(k, v)
		}
	}
	if used+cost > budget {
		if err := flushTail(s.spec.Name, tail, log); err != nil {
			s.tailTx = nil
			return err
		}
		s.movedIn = bt
		used = 0
	}
	if err := tail.Put(key, entry); err != nil {
		s.tailTx = nil
		return err
	}
	s.tailTx, s.tailUsed = bt, used+cost
	return nil
}

// flushTail moves every entry of kind's tail to its log, at its position.
func flushTail(kind string, tail *bolt.Bucket, log kv.Bucket) error {
	var keys [][]byte
	c := tail.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			// Only raw bbolt writing in oncekv's namespace makes one.
			return fmt.Errorf("recstore: the %s tail holds a nested bucket at key %x: the file was changed by another program", kind, k)
		}
		k = bytes.Clone(k)
		if err := log.Put(k, bytes.Clone(v)); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	for _, k := range keys {
		if err := tail.Delete(k); err != nil {
			return err
		}
	}
	failpoint.Inject(failpoint.RecstoreTailMoved)
	return nil
}

// union returns the log and the tail of spec in tx as one bucket, or nil
// when the log does not exist.
func union(tx kv.Tx, log, tail keyspace.Namespace) kv.Bucket {
	lb := log.Bucket(tx)
	if lb == nil {
		return nil
	}
	tb := tail.Bucket(tx)
	if tb == nil {
		return lb
	}
	return &unionBucket{log: lb, tail: tb}
}

// unionBucket reads the log and its tail as one bucket: positions are in
// one of the two. A value put at a position goes where the position is
// (the log, for a new one); Delete deletes it from both.
type unionBucket struct{ log, tail kv.Bucket }

func (u *unionBucket) Get(k []byte) []byte {
	if v := u.tail.Get(k); v != nil {
		return v
	}
	return u.log.Get(k)
}

func (u *unionBucket) Put(k, v []byte) error {
	if u.tail.Get(k) != nil {
		return u.tail.Put(k, v)
	}
	return u.log.Put(k, v)
}

func (u *unionBucket) Delete(k []byte) error {
	if err := u.tail.Delete(k); err != nil {
		return err
	}
	return u.log.Delete(k)
}

func (u *unionBucket) Cursor() kv.Cursor {
	return &unionCursor{a: u.log.Cursor(), b: u.tail.Cursor()}
}

func (u *unionBucket) NextSequence() (uint64, error) { return u.log.NextSequence() }

// unionCursor merges two cursors over disjoint key sets. Moving forward,
// each sub-cursor rests on its first key after the union's current key
// (or on it, for the one the current key came from); moving backward, on
// its last key before it. A change of direction positions both again.
type unionCursor struct {
	a, b           kv.Cursor
	ak, av, bk, bv []byte
	fromA          bool // the current key is a's
	backward       bool
	cur            []byte
}

func (c *unionCursor) First() ([]byte, []byte) {
	c.ak, c.av = c.a.First()
	c.bk, c.bv = c.b.First()
	c.backward = false
	return c.pick()
}

func (c *unionCursor) Last() ([]byte, []byte) {
	c.ak, c.av = c.a.Last()
	c.bk, c.bv = c.b.Last()
	c.backward = true
	return c.pick()
}

func (c *unionCursor) Seek(k []byte) ([]byte, []byte) {
	c.ak, c.av = c.a.Seek(k)
	c.bk, c.bv = c.b.Seek(k)
	c.backward = false
	return c.pick()
}

func (c *unionCursor) Next() ([]byte, []byte) { return c.step(false) }

func (c *unionCursor) Prev() ([]byte, []byte) { return c.step(true) }

// step moves one key in the direction asked. Going on, only the cursor
// the current key came from moves; turning, both are placed again on
// their nearest key past the current one.
func (c *unionCursor) step(backward bool) ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	if backward != c.backward {
		place := after
		if backward {
			place = before
		}
		c.ak, c.av = place(c.a, c.cur)
		c.bk, c.bv = place(c.b, c.cur)
		c.backward = backward
		return c.pick()
	}
	move := kv.Cursor.Next
	if backward {
		move = kv.Cursor.Prev
	}
	if c.fromA {
		c.ak, c.av = move(c.a)
	} else {
		c.bk, c.bv = move(c.b)
	}
	return c.pick()
}

// after moves cur to its first key after k.
func after(cur kv.Cursor, k []byte) ([]byte, []byte) {
	key, v := cur.Seek(k)
	if key != nil && bytes.Equal(key, k) {
		return cur.Next()
	}
	return key, v
}

// before moves cur to its last key before k.
func before(cur kv.Cursor, k []byte) ([]byte, []byte) {
	if key, _ := cur.Seek(k); key == nil {
		return cur.Last()
	}
	return cur.Prev()
}

// pick makes the nearer of the two sub-cursors' keys, in the direction
// of travel, the current one.
func (c *unionCursor) pick() ([]byte, []byte) {
	switch {
	case c.ak == nil && c.bk == nil:
		c.cur = nil
		return nil, nil
	case c.bk == nil:
		c.fromA = true
	case c.ak == nil:
		c.fromA = false
	default:
		cmp := bytes.Compare(c.ak, c.bk)
		c.fromA = cmp == 0 || (cmp < 0) != c.backward // a key in both: a's first
	}
	if c.fromA {
		c.cur = c.ak
		return c.ak, c.av
	}
	c.cur = c.bk
	return c.bk, c.bv
}

// FlushTail moves every entry of spec's tail to its log in tx (nothing
// when there is no tail), for tests and tools that work on the log's raw
// entries.
func FlushTail(tx kv.Tx, spec Spec) error {
	bt := kv.BoltTx(tx)
	if bt == nil {
		return nil
	}
	tail := bt.Bucket(TailBucket(spec))
	if tail == nil {
		return nil
	}
	log, err := packedLog(tx, spec.logNS())
	if err != nil {
		return err
	}
	return flushTail(spec.Name, tail, log)
}

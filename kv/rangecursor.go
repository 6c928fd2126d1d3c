package kv

import "bytes"

// Ranger is a Bucket that can bound a cursor to a range of its keys itself.
// A backend whose reads are requests and whose commits compare what a
// transaction read (etcd's) implements it: a scan through Bucket.Cursor
// that stops at hi has still fetched, and its commit compares, the page of
// keys past hi (and, on a short page, every key to the end of the bucket),
// so it conflicts with every transaction that writes any of them. A
// bounded cursor reads, and compares, only [lo, hi). RangeCursor uses it.
type Ranger interface {
	// RangeCursor returns a cursor over the bucket's keys in [lo, hi)
	// (hi nil: to the end of the bucket), as RangeCursor documents.
	RangeCursor(lo, hi []byte) Cursor
}

// RangeCursor returns a cursor over b's keys in [lo, hi), hi nil meaning
// to the end of b: First and Seek below lo give the first key at or
// above lo, Last the last key below hi, and no step leaves the range (a
// key outside it reads as the end, nil). Scan a group of keys that share
// a prefix (a tenant's counters, a scope's records) through it rather than
// through b.Cursor with a test that stops at the group's end: on bbolt the
// two cost the same, but on a backend that compares what a transaction
// read (etcd; see Ranger) only the bounded scan leaves the keys past the
// group out of the commit's compares, so that writes there do not refuse
// it.
//
// As with Bucket.Cursor, the transaction's own writes are seen, and a key
// deleted under the cursor is stepped past by seeking to it again.
func RangeCursor(b Bucket, lo, hi []byte) Cursor {
	if r, ok := b.(Ranger); ok {
		return r.RangeCursor(lo, hi)
	}
	return &rangeCursor{c: b.Cursor(), lo: lo, hi: hi}
}

// PrefixEnd returns the least key greater than every key that begins with
// prefix (the hi of RangeCursor for a prefix), or nil when there is none
// (prefix empty or all 0xff bytes: the range goes to the end).
func PrefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// rangeCursor is RangeCursor over a backend's plain cursor: it stops at
// the bounds. Past a bound it stays at the end, as a cursor past the last
// key does: Next and Prev give nil until First, Last or Seek.
type rangeCursor struct {
	c      Cursor
	lo, hi []byte
	out    bool // the last move left the range
}

func (r *rangeCursor) in(k, v []byte) ([]byte, []byte) {
	if k == nil || bytes.Compare(k, r.lo) < 0 || (r.hi != nil && bytes.Compare(k, r.hi) >= 0) {
		r.out = true
		return nil, nil
	}
	r.out = false
	return k, v
}

func (r *rangeCursor) First() ([]byte, []byte) { return r.Seek(r.lo) }

func (r *rangeCursor) Last() ([]byte, []byte) {
	if r.hi == nil {
		return r.in(r.c.Last())
	}
	if k, _ := r.c.Seek(r.hi); k == nil {
		return r.in(r.c.Last())
	}
	return r.in(r.c.Prev())
}

func (r *rangeCursor) Seek(seek []byte) ([]byte, []byte) {
	if bytes.Compare(seek, r.lo) < 0 {
		seek = r.lo
	}
	return r.in(r.c.Seek(seek))
}

func (r *rangeCursor) Next() ([]byte, []byte) {
	if r.out {
		return nil, nil
	}
	return r.in(r.c.Next())
}

func (r *rangeCursor) Prev() ([]byte, []byte) {
	if r.out {
		return nil, nil
	}
	return r.in(r.c.Prev())
}

package keyspace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// TimeIndex is a reserved bucket of (time, record key) entries: an expiry
// index, a due-time index. Writers keep it in the same transaction as the
// records it indexes, so that a sweep or a scheduler reads only what is due,
// in time order, instead of scanning every record.
//
// Entry keys are the time as 8 big-endian bytes (Unix nanoseconds with the
// sign bit flipped, so byte order is time order) followed by the record key;
// values are empty.
type TimeIndex struct {
	ns Namespace
}

// NewTimeIndex returns the index stored in the reserved bucket name.
func NewTimeIndex(name string) TimeIndex { return TimeIndex{ns: New(name)} }

// Namespace returns the index's bucket.
func (x TimeIndex) Namespace() Namespace { return x.ns }

func timeKey(at time.Time, key []byte) []byte {
	k := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(k, uint64(unixNano(at))^(1<<63))
	return append(k, key...)
}

// SplitTimeKey splits an index entry key into its time and record key.
func SplitTimeKey(k []byte) (time.Time, []byte, error) {
	if len(k) < 8 {
		return time.Time{}, nil, fmt.Errorf("kv: time index key of %d bytes is too short", len(k))
	}
	ns := int64(binary.BigEndian.Uint64(k) ^ (1 << 63))
	return time.Unix(0, ns).UTC(), k[8:], nil
}

// Put records that the record key expires at at.
func (x TimeIndex) Put(tx kv.Tx, at time.Time, key []byte) error {
	b, err := x.ns.Create(tx)
	if err != nil {
		return err
	}
	return b.Put(timeKey(at, key), nil)
}

// Delete removes the entry for key at at. A missing entry is not an error.
func (x TimeIndex) Delete(tx kv.Tx, at time.Time, key []byte) error {
	b := x.ns.Bucket(tx)
	if b == nil {
		return nil
	}
	return b.Delete(timeKey(at, key))
}

// Move replaces the entry (from, key) with (to, key), when they differ.
func (x TimeIndex) Move(tx kv.Tx, from, to time.Time, key []byte) error {
	if from.Equal(to) {
		return nil
	}
	if !from.IsZero() {
		if err := x.Delete(tx, from, key); err != nil {
			return err
		}
	}
	return x.Put(tx, to, key)
}

// Has reports whether the entry (at, key) exists.
func (x TimeIndex) Has(tx kv.Tx, at time.Time, key []byte) bool {
	b := x.ns.Bucket(tx)
	return b != nil && hasKey(b, timeKey(at, key))
}

// hasKey reports whether b holds k, whose value may be empty (an index
// entry's), through a cursor bounded to k alone: on etcd a plain cursor's
// Seek fetched a page of 128 entries to answer it, and the consistency
// check asks once a record.
func hasKey(b kv.Bucket, k []byte) bool {
	got, _ := kv.RangeCursor(b, k, append(bytes.Clone(k), 0)).First()
	return got != nil
}

// Due returns up to limit entries whose time is at or before now, in expiry
// order, starting after the entry key `after` (nil to start at the
// beginning). The keys are copies, so the caller may delete them later in
// another transaction.
func (x TimeIndex) Due(tx kv.Tx, now time.Time, after []byte, limit int) []kv.Due {
	b := x.ns.Bucket(tx)
	if b == nil {
		return nil
	}
	end := timeKey(now, nil)
	var out []kv.Due
	c := b.Cursor()
	var k []byte
	if after == nil {
		k, _ = c.First()
	} else {
		k, _ = c.Seek(after)
		if k != nil && string(k) == string(after) {
			k, _ = c.Next()
		}
	}
	for ; k != nil && len(out) < limit; k, _ = c.Next() {
		if string(k[:min(8, len(k))]) > string(end) {
			break
		}
		at, rk, err := SplitTimeKey(k)
		if err != nil {
			continue
		}
		out = append(out, kv.Due{At: at, Key: append([]byte(nil), rk...), Cursor: append([]byte(nil), k...)})
	}
	return out
}

// ForEach calls fn for every entry in expiry order. The key passed to fn is
// only valid during the call.
func (x TimeIndex) ForEach(tx kv.Tx, fn func(at time.Time, key []byte) error) error {
	b := x.ns.Bucket(tx)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		at, rk, err := SplitTimeKey(k)
		if err != nil {
			return err
		}
		if err := fn(at, rk); err != nil {
			return err
		}
	}
	return nil
}

// First returns the earliest time in the index, and false if it is empty.
func (x TimeIndex) First(tx kv.Tx) (time.Time, bool) {
	b := x.ns.Bucket(tx)
	if b == nil {
		return time.Time{}, false
	}
	k, _ := b.Cursor().First()
	if k == nil {
		return time.Time{}, false
	}
	at, _, err := SplitTimeKey(k)
	return at, err == nil
}

// unixNano is t.UnixNano saturated at the ends of its range (t.UnixNano
// wraps outside them).
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

package kv

import (
	"bytes"

	"github.com/oncekv/oncekv/internal/record"
)

var reservedPrefix = []byte(record.ReservedPrefix)

func isReserved(name []byte) bool { return bytes.HasPrefix(name, reservedPrefix) }

// guarded is the Tx a DB hands to its callers: the backend's transaction
// with oncekv's reserved top-level buckets hidden, so an application's
// buckets can never collide with them. oncekv's own packages reach the
// reserved buckets through Unwrap.
type guarded struct{ tx Tx }

// guard wraps a backend transaction for callers. It is idempotent.
func guard(tx Tx) Tx {
	if g, ok := tx.(*guarded); ok {
		return g
	}
	return &guarded{tx: tx}
}

// Unwrap returns the backend's transaction, reserved buckets included.
func (g *guarded) Unwrap() Tx { return g.tx }

func (g *guarded) Bucket(name []byte) Bucket {
	if isReserved(name) {
		return nil
	}
	return g.tx.Bucket(name)
}

func (g *guarded) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	if isReserved(name) {
		return nil, ErrReservedName
	}
	return g.tx.CreateBucketIfNotExists(name)
}

func (g *guarded) DeleteBucket(name []byte) error {
	if isReserved(name) {
		return ErrReservedName
	}
	return g.tx.DeleteBucket(name)
}

func (g *guarded) Cursor() Cursor     { return &guardedCursor{c: g.tx.Cursor()} }
func (g *guarded) Writable() bool     { return g.tx.Writable() }
func (g *guarded) OnCommit(fn func()) { g.tx.OnCommit(fn) }

// guardedCursor skips the reserved names among the top-level buckets.
type guardedCursor struct{ c Cursor }

func (c *guardedCursor) skip(k, v []byte, next func() ([]byte, []byte)) ([]byte, []byte) {
	for k != nil && isReserved(k) {
		k, v = next()
	}
	return k, v
}

func (c *guardedCursor) First() ([]byte, []byte) {
	k, v := c.c.First()
	return c.skip(k, v, c.c.Next)
}

func (c *guardedCursor) Last() ([]byte, []byte) {
	k, v := c.c.Last()
	return c.skip(k, v, c.c.Prev)
}

func (c *guardedCursor) Next() ([]byte, []byte) {
	k, v := c.c.Next()
	return c.skip(k, v, c.c.Next)
}

func (c *guardedCursor) Prev() ([]byte, []byte) {
	k, v := c.c.Prev()
	return c.skip(k, v, c.c.Prev)
}

func (c *guardedCursor) Seek(seek []byte) ([]byte, []byte) {
	k, v := c.c.Seek(seek)
	return c.skip(k, v, c.c.Next)
}

func (c *guardedCursor) Delete() error { return c.c.Delete() }

// ReservedPrefix starts the name of every top-level bucket oncekv owns. A
// DB's transactions (and WrapTx) refuse to create, open or delete such
// names and leave them out of Tx.Cursor, so an application's buckets can
// never collide with oncekv's. Code that uses a raw *bbolt.Tx can still
// reach them; it must leave them alone.
const ReservedPrefix = record.ReservedPrefix

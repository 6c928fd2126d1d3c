package kv

import (
	"bytes"

	"github.com/oncekv/oncekv/internal/record"
)

var reservedPrefix = []byte(record.ReservedPrefix)

func isReserved(name []byte) bool { return bytes.HasPrefix(name, reservedPrefix) }

// guarded is the Tx a DB hands to its callers: the backend's transaction
// with oncekv's reserved top-level buckets (their names start with
// "\x00oncekv/") hidden, so an application's buckets can never collide with
// them: creating or opening such a name fails with ErrReservedName, and
// Tx.Cursor leaves them out. oncekv's own packages reach the
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

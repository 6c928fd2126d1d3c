package kv

import (
	"bytes"

	bolt "go.etcd.io/bbolt"

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
type guarded struct {
	tx Tx
	db *DB // the DB that handed it out (nil from WrapTx)
}

// guard wraps a backend transaction for callers. It is idempotent. A bbolt
// transaction gets a guard that is a conversion of *bbolt.Tx (no
// allocation: a replay's read transaction is on the hot path).
func guard(tx Tx) Tx {
	switch t := tx.(type) {
	case *guarded, *guardedBolt:
		return t
	case *boltTx:
		return (*guardedBolt)(t)
	}
	return &guarded{tx: tx}
}

// guard is the package-level guard for the transactions db hands out: on a
// backend other than bbolt the wrapper also remembers db (CipherOf).
func (db *DB) guard(tx Tx) Tx {
	if _, ok := tx.(*boltTx); ok {
		return guard(tx)
	}
	return &guarded{tx: tx, db: db}
}

// guardedBolt is guarded for bbolt, as a conversion of its transaction.
type guardedBolt bolt.Tx

func (g *guardedBolt) raw() Tx                   { return (*boltTx)(g) }
func (g *guardedBolt) Unwrap() Tx                { return g.raw() }
func (g *guardedBolt) Bucket(name []byte) Bucket { return guardBucket(g.raw(), name) }
func (g *guardedBolt) CreateBucketIfNotExists(n []byte) (Bucket, error) {
	return guardCreate(g.raw(), n)
}
func (g *guardedBolt) Cursor() Cursor     { return &guardedCursor{c: g.raw().Cursor()} }
func (g *guardedBolt) Writable() bool     { return g.raw().Writable() }
func (g *guardedBolt) OnCommit(fn func()) { g.raw().OnCommit(fn) }

func guardBucket(tx Tx, name []byte) Bucket {
	if isReserved(name) {
		return nil
	}
	return tx.Bucket(name)
}

func guardCreate(tx Tx, name []byte) (Bucket, error) {
	if isReserved(name) {
		return nil, ErrReservedName
	}
	return tx.CreateBucketIfNotExists(name)
}

// Unwrap returns the backend's transaction, reserved buckets included.
func (g *guarded) Unwrap() Tx { return g.tx }

func (g *guarded) Bucket(name []byte) Bucket { return guardBucket(g.tx, name) }

func (g *guarded) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	return guardCreate(g.tx, name)
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

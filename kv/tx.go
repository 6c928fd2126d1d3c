package kv

import (
	"bytes"

	bolt "go.etcd.io/bbolt"
)

// Tx is the transaction every oncekv call works in. It is deliberately small
// (buckets, get, put, delete, cursor, a commit hook) so that a backend other
// than bbolt can implement it.
//
// A Tx is only valid inside the function it was handed to. Byte slices
// returned by Get and Cursor point into the database and are valid only until
// the transaction ends; copy them to keep them.
type Tx interface {
	// Bucket returns the top-level bucket with the given name, or nil.
	Bucket(name []byte) Bucket
	// CreateBucketIfNotExists returns the named top-level bucket, creating it
	// if needed. Names in the reserved namespace are refused with ErrReservedName.
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// DeleteBucket removes a top-level bucket and everything in it.
	DeleteBucket(name []byte) error
	// Writable reports whether the transaction may write.
	Writable() bool
	// OnCommit registers fn to run after the transaction commits. It does not
	// run if the transaction rolls back.
	OnCommit(fn func())

	// reserved gives oncekv's own packages access to the reserved namespace;
	// it is unexported so that only this package's implementations satisfy Tx.
	reserved(name []byte, create bool) (Bucket, error)
	// reservedNames lists the reserved top-level buckets that exist.
	reservedNames() []string
}

// Bucket is a collection of key/value pairs, possibly holding nested buckets.
type Bucket interface {
	// Get returns the value for key, or nil if the key is absent or names a
	// nested bucket.
	Get(key []byte) []byte
	// Put sets key to value.
	Put(key, value []byte) error
	// Delete removes key. Deleting an absent key is not an error.
	Delete(key []byte) error
	// Cursor returns a cursor over the bucket's keys in byte order.
	Cursor() Cursor
	// Bucket returns the nested bucket with the given name, or nil.
	Bucket(name []byte) Bucket
	// CreateBucketIfNotExists returns the nested bucket, creating it if needed.
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// DeleteBucket removes a nested bucket.
	DeleteBucket(name []byte) error
	// NextSequence returns a new, monotonically increasing integer for the bucket.
	NextSequence() (uint64, error)
}

// Cursor iterates a bucket in key order. Values of nested buckets are nil.
type Cursor interface {
	// First moves to the first key.
	First() (key, value []byte)
	// Last moves to the last key.
	Last() (key, value []byte)
	// Next moves to the next key.
	Next() (key, value []byte)
	// Prev moves to the previous key.
	Prev() (key, value []byte)
	// Seek moves to the first key >= seek.
	Seek(seek []byte) (key, value []byte)
	// Delete removes the key under the cursor.
	Delete() error
}

// boltTx, boltBucket and boltCursor are conversions of bbolt's own types, so
// handing them out as interfaces costs no allocation.
type (
	boltTx     bolt.Tx
	boltBucket bolt.Bucket
	boltCursor bolt.Cursor
)

var (
	_ Tx     = (*boltTx)(nil)
	_ Bucket = (*boltBucket)(nil)
	_ Cursor = (*boltCursor)(nil)
)

// WrapTx adapts a caller's own bbolt transaction so it can be passed to any
// oncekv call that takes a Tx. The caller keeps ownership: oncekv never
// commits or rolls it back. The database must have been prepared once with
// Open or Wrap, which writes the format record.
func WrapTx(tx *bolt.Tx) Tx { return (*boltTx)(tx) }

// BoltTx returns the bbolt transaction behind tx, or nil if tx is not backed
// by bbolt. Use it to mix oncekv calls with code written against bbolt. A Tx
// that wraps another (the HTTP middleware's write tracker) offers an
// Unwrap() Tx method, which BoltTx follows.
func BoltTx(tx Tx) *bolt.Tx {
	for {
		switch t := tx.(type) {
		case *boltTx:
			return (*bolt.Tx)(t)
		case interface{ Unwrap() Tx }:
			tx = t.Unwrap()
		default:
			return nil
		}
	}
}

func (t *boltTx) bolt() *bolt.Tx { return (*bolt.Tx)(t) }

func (t *boltTx) Bucket(name []byte) Bucket {
	if IsReserved(name) {
		return nil
	}
	return wrapBucket(t.bolt().Bucket(name))
}

func (t *boltTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	if IsReserved(name) {
		return nil, ErrReservedName
	}
	b, err := t.bolt().CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return (*boltBucket)(b), nil
}

func (t *boltTx) DeleteBucket(name []byte) error {
	if IsReserved(name) {
		return ErrReservedName
	}
	return t.bolt().DeleteBucket(name)
}

func (t *boltTx) Writable() bool     { return t.bolt().Writable() }
func (t *boltTx) OnCommit(fn func()) { t.bolt().OnCommit(fn) }

func (t *boltTx) reserved(name []byte, create bool) (Bucket, error) {
	if !create || !t.bolt().Writable() {
		return wrapBucket(t.bolt().Bucket(name)), nil
	}
	b, err := t.bolt().CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return (*boltBucket)(b), nil
}

func (t *boltTx) reservedNames() []string {
	var names []string
	c := t.bolt().Cursor()
	for k, _ := c.Seek(reservedPrefix); k != nil && IsReserved(k); k, _ = c.Next() {
		names = append(names, string(k[len(reservedPrefix):]))
	}
	return names
}

func wrapBucket(b *bolt.Bucket) Bucket {
	if b == nil {
		return nil // a nil *boltBucket in an interface would not compare equal to nil
	}
	return (*boltBucket)(b)
}

func (b *boltBucket) bolt() *bolt.Bucket { return (*bolt.Bucket)(b) }

func (b *boltBucket) Get(key []byte) []byte       { return b.bolt().Get(key) }
func (b *boltBucket) Put(key, value []byte) error { return b.bolt().Put(key, value) }
func (b *boltBucket) Delete(key []byte) error     { return b.bolt().Delete(key) }
func (b *boltBucket) Cursor() Cursor              { return (*boltCursor)(b.bolt().Cursor()) }
func (b *boltBucket) Bucket(name []byte) Bucket   { return wrapBucket(b.bolt().Bucket(name)) }
func (b *boltBucket) DeleteBucket(name []byte) error {
	return b.bolt().DeleteBucket(name)
}
func (b *boltBucket) NextSequence() (uint64, error) { return b.bolt().NextSequence() }
func (b *boltBucket) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	nb, err := b.bolt().CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return (*boltBucket)(nb), nil
}

func (c *boltCursor) bolt() *bolt.Cursor                { return (*bolt.Cursor)(c) }
func (c *boltCursor) First() ([]byte, []byte)           { return c.bolt().First() }
func (c *boltCursor) Last() ([]byte, []byte)            { return c.bolt().Last() }
func (c *boltCursor) Next() ([]byte, []byte)            { return c.bolt().Next() }
func (c *boltCursor) Prev() ([]byte, []byte)            { return c.bolt().Prev() }
func (c *boltCursor) Seek(seek []byte) ([]byte, []byte) { return c.bolt().Seek(seek) }
func (c *boltCursor) Delete() error                     { return c.bolt().Delete() }

// HasPrefix reports whether key starts with prefix; a small helper for prefix
// scans with a Cursor.
func HasPrefix(key, prefix []byte) bool { return bytes.HasPrefix(key, prefix) }

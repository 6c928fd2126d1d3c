package kv

import "context"

// The port: the small interface every layer above kv is written against. The
// bbolt backend is built in (Open, Wrap); package etcdkv, in its own module,
// implements the same interfaces over etcd. A backend is done when
// kvtest.RunConformance passes against it unchanged.

// Backend is a transactional key/value store the layers above can run on.
type Backend interface {
	// Update runs fn in a read-write transaction and commits it if fn returns
	// nil; an error or a panic rolls it back. A backend without a single
	// writer (Traits.SingleWriter false) may run fn more than once, after an
	// optimistic conflict: fn must have no effect outside the transaction.
	// Its Tx may have a method Wrote() bool that reports whether the
	// transaction wrote anything: one that wrote nothing and so sent no
	// commit (etcd's) is no commit to the observer (observe.Commit). A Tx
	// whose reads are requests may also have Prefetch([]BucketKey) (see
	// BucketKey).
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction over one consistent snapshot.
	// A backend without a single writer may run fn more than once, after a
	// read that failed in a way worth another attempt (etcd: a leader
	// change, the read revision compacted away): fn must start afresh each
	// time, keeping nothing a first run gathered (kvtest.RetriedViews runs
	// every View twice, to test that).
	View(ctx context.Context, fn func(Tx) error) error
	// Traits describes what the layers above may rely on.
	Traits() Traits
	// Close releases the backend. Transactions under way finish first.
	Close() error
}

// Traits describes a backend's guarantees. The layers above choose their
// strategy from it: the ledger keeps an in-memory key directory and recovers
// a dead incarnation's claims at once only where SingleWriter is true.
type Traits struct {
	// Name names the backend in messages and stats ("bbolt", "etcd").
	Name string
	// SingleWriter is true when exactly one process can write the store at a
	// time (bbolt's file lock) and write transactions are serialised within
	// it: in-process state (a key directory, waiters) then sees every write.
	SingleWriter bool
	// GroupCommit is true when many callers' functions may share one write
	// transaction (DB.Batch groups them); false makes Batch an Update.
	GroupCommit bool
	// MaxTxOps bounds the writes one transaction may carry (0: no bound).
	// Layers that write in bulk (sweeps, migrations) stay below it
	// (Traits.Fit).
	MaxTxOps int
	// Watch, if set, returns a channel closed when the value under key in
	// the top-level bucket changes (or ctx ends). A backend with several
	// writers sets it, so that a caller waiting for another process's work
	// (the ledger's waiters) is woken; a single-writer backend leaves it
	// nil: in-process notifications see every write.
	Watch func(ctx context.Context, bucket, key []byte) <-chan struct{}
}

// Fit returns how many of n items, each taking up to opsEach writes, one
// transaction should carry: n on a backend without a bound, else no more
// than fit within MaxTxOps; at least 1. Bulk work (sweeps, the relay's
// marks, requeues, rekeys) sizes its transactions with it.
func (t Traits) Fit(n, opsEach int) int {
	if t.MaxTxOps > 0 {
		n = min(n, t.MaxTxOps/max(opsEach, 1))
	}
	return max(1, n)
}

// Tx is one transaction. It is only valid inside the function it was handed
// to. Byte slices returned by Get and Cursor point into the store and are
// valid only until the transaction ends; copy them to keep them. Values
// passed to Put must not be modified until the transaction ends.
type Tx interface {
	// Bucket returns the top-level bucket with the given name, or nil.
	Bucket(name []byte) Bucket
	// CreateBucketIfNotExists returns the named top-level bucket, creating it
	// if needed. Names in oncekv's reserved namespace are refused with
	// ErrReservedName when the Tx came from a DB, an empty name with
	// ErrBucketNameRequired, and any call in a read-only transaction with
	// ErrTxNotWritable, even for a bucket that exists.
	CreateBucketIfNotExists(name []byte) (Bucket, error)
	// Cursor iterates the names of the top-level buckets in byte order
	// (values are nil).
	Cursor() Cursor
	// Writable reports whether the transaction may write.
	Writable() bool
	// OnCommit registers fn to run after the transaction commits. It does not
	// run if the transaction rolls back.
	OnCommit(fn func())
}

// Bucket is a collection of key/value pairs. The port has no nested
// buckets: code that needs them on bbolt uses kv.BoltTx.
type Bucket interface {
	// Get returns the value for key, or nil if the key is absent.
	Get(key []byte) []byte
	// Put sets key to value. An empty key fails with ErrKeyRequired, one
	// longer than MaxKeySize with ErrKeyTooLarge, any write in a read-only
	// transaction with ErrTxNotWritable; a failed Put writes nothing and
	// leaves the transaction usable.
	Put(key, value []byte) error
	// Delete removes key. Deleting an absent key is not an error.
	Delete(key []byte) error
	// Cursor returns a cursor over the bucket's keys in byte order.
	Cursor() Cursor
	// NextSequence returns a new, monotonically increasing integer for the
	// bucket; it is rolled back with the transaction.
	NextSequence() (uint64, error)
}

// Cursor iterates a bucket in key order. To delete while iterating, collect
// the keys and delete them through the Bucket, or delete the key under the
// cursor and Seek to it again.
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
}

// wroter is a backend's Tx that tells whether it wrote anything (see
// Backend.Update).
type wroter interface{ Wrote() bool }

// BucketKey names a key in a top-level bucket. A backend's Tx whose every
// read is a request (etcd's) may have a method Prefetch([]BucketKey) that
// reads several such keys in one request, at the transaction's snapshot
// (and fixing it, as a first read does), so that its Gets of them that
// follow send nothing: oncekv's packages hand it the keys a transaction is
// about to read. A key of a bucket that does not exist reads as absent,
// and whether each bucket exists is read in the same request. A failed
// prefetch fails the transaction as a failed Get does.
//
// A backend that commits optimistically (etcd's) may also answer a
// prefetch without a request, from values it wrote or read recently, and
// take a key marked Absent as absent: its commit compares every key read,
// so a guess that turns out wrong makes the transaction run again, never
// commit on it (etcdkv's doc, "Guessing instead of reading").
type BucketKey struct {
	Bucket, Key []byte
	// Absent says the caller expects the key to be absent (the key of a
	// new record, a new row's, an event's ID not yet added).
	Absent bool
}

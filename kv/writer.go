package kv

import "time"

// WriterState is what the database's writer is doing. bbolt has one
// writer: a write transaction that holds it long (a function that waits
// on something inside its transaction, a slow disk) holds back every
// other write of the process, and this is where it shows.
type WriterState struct {
	// Held is how long the write transaction running now through this DB
	// (Update, Batch, and the calls built on them) has held the writer:
	// its functions, its commit and its fsync. 0 when none runs. A
	// caller's own bbolt transactions (Wrap) are not seen, nor, on a
	// backend with several writers (etcd), any: it is always 0 there.
	Held time.Duration
	// Queued is the number of Batch calls waiting for the next batch.
	Queued int
}

// Writer reports what the database's writer is doing now.
func (db *DB) Writer() WriterState {
	var st WriterState
	if since := db.writerSince.Load(); since != 0 {
		st.Held = max(time.Since(writerEpoch)-time.Duration(since-1), 0)
	}
	db.batch.mu.Lock()
	st.Queued = len(db.batch.queue)
	db.batch.mu.Unlock()
	return st
}

// writerEpoch is the monotonic origin of DB.writerSince.
var writerEpoch = time.Now()

// holdWriter notes, at the start of a write transaction's function (the
// writer is held), when it started, and returns the mark to pass to
// releaseWriter once the transaction is over. Backends with several
// writers are not tracked.
func (db *DB) holdWriter() int64 {
	if !db.traits.SingleWriter {
		return 0
	}
	mark := int64(time.Since(writerEpoch)) + 1 // never 0: 0 is "none"
	db.writerSince.Store(mark)
	return mark
}

// releaseWriter forgets the transaction of mark, unless the next one has
// taken the writer already.
func (db *DB) releaseWriter(mark int64) {
	if mark != 0 {
		db.writerSince.CompareAndSwap(mark, 0)
	}
}

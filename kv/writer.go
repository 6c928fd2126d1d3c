package kv

import (
	"context"
	"time"
)

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
	// Queued is the number of writes waiting for the writer: the Batch
	// calls queued for the next batch, and the write transactions (an
	// Update, a batch about to run) waiting for the one running now to end.
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
	st.Queued += int(db.turnWaiting.Load())
	return st
}

// writerEpoch is the monotonic origin of DB.writerSince.
var writerEpoch = time.Now()

// takeTurn waits for the writer's turn, or for ctx to end, and notes when
// it took it (Writer's Held); while it waits, it is counted (Writer's
// Queued). A free turn is taken without counting.
func (db *DB) takeTurn(ctx context.Context) error {
	select {
	case db.turn <- struct{}{}:
	default:
		db.turnWaiting.Add(1)
		select {
		case db.turn <- struct{}{}:
			db.turnWaiting.Add(-1)
		case <-ctx.Done():
			db.turnWaiting.Add(-1)
			return ctx.Err()
		}
	}
	db.writerSince.Store(int64(time.Since(writerEpoch)) + 1) // never 0: 0 is "none"
	return nil
}

// giveTurn forgets the holder, then gives the turn back: the turn orders
// the notes, one holder at a time.
func (db *DB) giveTurn() {
	db.writerSince.Store(0)
	<-db.turn
}

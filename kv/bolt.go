package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/rerun"
)

// boltBackend is the embedded default: one bbolt file, one writer process,
// group commit.
type boltBackend struct {
	db    *bolt.DB
	owned bool // Close closes the bbolt handle (Open); Wrap leaves it to the caller

	// syncing is the transaction kv is committing, from the end of its
	// function until its sync has returned or its Commit failed (0:
	// none). bbolt writes the meta page into the file before its sync,
	// and a reader that begins in between starts from that commit: such
	// a reader waits (settle).
	syncing atomic.Int64
	wake    func() // committed, as a value made once (newBoltBackend)
	// freelistShort is set when a panic in bbolt's Commit left its list
	// of free pages in memory short of the pages that commit had taken
	// (write): Close then leaves the list out of the file, and the next
	// open builds it from the file's pages. (With Options.SyncFreelist
	// the next commit writes the short list: those pages stay unused.)
	freelistShort atomic.Bool
	// locked is set when a read fault as bbolt began a transaction (it
	// reads the meta pages then) left a lock of bbolt's held for ever: the
	// writer's, or the one a read transaction holds while it begins,
	// which bbolt's Close waits for (begin).
	locked atomic.Bool
	// unsynced is the commit whose sync failed after its meta page was
	// written, for the readers that waited for it.
	unsynced atomic.Pointer[unsyncedCommit]
	waiters  atomic.Int32 // readers waiting for a commit's sync
	waitMu   sync.Mutex
	synced   chan struct{} // closed when the commit waited for has synced (or failed); made by its first waiter
}

var _ Backend = (*boltBackend)(nil)

// newBoltBackend returns the backend over b; owned makes Close close b.
func newBoltBackend(b *bolt.DB, owned bool) *boltBackend {
	bb := &boltBackend{db: b, owned: owned}
	bb.wake = bb.committed
	return bb
}

func (b *boltBackend) Update(_ context.Context, fn func(Tx) error) error {
	if rerun.Enabled { // a first run, rolled back (package internal/rerun)
		err := b.write(func(t *bolt.Tx) error {
			if err := fn((*boltTx)(t)); err != nil {
				return err
			}
			return errFirstRun
		})
		if !errors.Is(err, errFirstRun) {
			return err // fn failed: not a conflict, not run again (as on etcd)
		}
		return b.update(func(t *bolt.Tx) error { return again(fn, (*boltTx)(t)) })
	}
	return b.update(func(t *bolt.Tx) error { return fn((*boltTx)(t)) })
}

// update is write (bbolt's Update), telling apart a commit that failed once its
// meta page was written (*unsyncedCommit).
//
// bbolt writes a commit's pages, syncs them, writes the meta page into
// the file and syncs again. When that last sync fails, Commit rolls back
// and returns the error, but the meta page is already in the page cache
// that bbolt's memory map reads: the next transaction starts from it, so
// the commit the caller was told had failed is the one this process goes
// on from (and bbolt reloads its freelist to match). Whether the file on
// the disk holds it is not known: after a failed sync the kernel may drop
// the page, and a later commit would then build on pages the disk never
// got. update sees the case by the transaction that is live after the
// failure: the failed one. (A writer outside kv, a raw bbolt Update on a
// wrapped handle, that commits in between is taken for it: the DB then
// refuses calls until reopened too, which is safe.)
func (b *boltBackend) update(fn func(*bolt.Tx) error) error {
	id := 0 // the transaction, once its function has succeeded: a failure after is its commit's
	defer func() {
		if id != 0 {
			b.committed()
		}
	}()
	err := b.write(func(t *bolt.Tx) error {
		// The first of the commit's handlers, which run once its sync has
		// returned: a handler that reads (a View) must not wait for the
		// end of the Commit that runs it.
		t.OnCommit(b.wake)
		if err := fn(t); err != nil {
			return err
		}
		id = t.ID()
		b.syncing.Store(int64(id))
		return nil
	})
	if err != nil && id != 0 && b.liveTx() >= id {
		u := &unsyncedCommit{tx: id, err: err}
		b.unsynced.Store(u)
		return u
	}
	return err
}

// write is bbolt's Update, its transaction begun and ended by hand, so
// that a panic in fn or in bbolt's Commit rolls it back without reading
// the file.
//
// bbolt's Update rolls back a transaction that a panic leaves open as it
// does after a failed commit: it rebuilds its list of free pages, from the
// list's page if the last commit wrote one and, if it did not (kv keeps
// the list out of commits, NoFreelistSync), by walking every page of the
// file in a goroutine of its own. After a read fault (a page the disk
// cannot read) that walk meets the fault again where nothing can recover
// it, and the process ends; on a sound file it costs a walk of the whole
// file with the writer held. The Rollback a caller calls gives back what
// the transaction freed and reads nothing. That is exact after a panic in
// fn, which takes no page (bbolt allocates in Commit). A panic in Commit
// may come after it took pages: they stay out of bbolt's list in memory
// until the file is opened again, and freelistShort keeps Close from
// writing that list into the file.
//
// bbolt's own failures in Commit (a write or a sync that fails) still roll
// back bbolt's way, inside Commit.
func (b *boltBackend) write(fn func(*bolt.Tx) error) error {
	t, err := b.begin(true)
	if err != nil {
		return err
	}
	committing := false
	defer func() {
		if t.DB() == nil {
			return // committed, or rolled back
		}
		// A panic, going on once this returns (kv's fault catcher takes
		// a read fault).
		if committing {
			b.freelistShort.Store(true)
		}
		_ = t.Rollback()
	}()
	if err := fn(t); err != nil {
		_ = t.Rollback() // ErrTxClosed when fn closed it itself
		return err
	}
	if t.DB() == nil {
		panic(errClosedByFn) // as bbolt's Update does, at the call
	}
	committing = true
	if err := t.Commit(); err != nil {
		if IsNoSpace(err) {
			return &noSpaceCommit{err} // the commit's, not fn's: it pauses the next (space.go)
		}
		return err
	}
	return nil
}

// begin is bbolt's Begin, noting in b.locked a panic raised in it: a read
// fault on a meta page, which bbolt reads after it has taken its locks and
// before it can give them back (the writer's lock for a write; for a read,
// the lock that every Begin and Close takes next). Such a lock stays held
// for ever, so Close must not wait for it.
func (b *boltBackend) begin(writable bool) (t *bolt.Tx, err error) {
	defer func() {
		if t == nil && err == nil { // a panic, going on
			b.locked.Store(true)
		}
	}()
	return b.db.Begin(writable)
}

// errClosedByFn is the panic of a write transaction whose function
// committed or rolled back bbolt's transaction itself (kv.BoltTx), a
// misuse that bbolt's Update refuses at the call.
var errClosedByFn = errors.New("kv: a write transaction's function committed or rolled back its bbolt.Tx itself; kv commits the transaction when the function returns nil and rolls it back otherwise")

// committed ends a commit's wait (settle): its sync has returned (the
// commit's first handler), or its Commit has failed.
func (b *boltBackend) committed() {
	b.syncing.Store(0)
	if b.waiters.Load() == 0 {
		return // a reader that comes after this load sees syncing cleared
	}
	b.waitMu.Lock()
	if b.synced != nil {
		close(b.synced)
		b.synced = nil
	}
	b.waitMu.Unlock()
}

// settle returns once the read transaction t may be read: at once, unless
// t starts from the commit kv is making, whose meta page is in the file
// and whose sync has not returned. Until it does, the disk may not hold
// that commit, and a power cut would take back what the reader handed
// out (a replayed answer, a backup). settle then waits for the commit's
// sync to return: nil once it succeeded, its *unsyncedCommit if it
// failed, ctx's error if ctx ends first. Commits of raw bbolt
// writers on a wrapped handle are not waited for.
func (b *boltBackend) settle(ctx context.Context, t *bolt.Tx) error {
	id := int64(t.ID())
	if id == b.syncing.Load() { // (a reader never starts from a transaction 0)
		if err := b.awaitCommit(ctx, id); err != nil {
			return err
		}
	}
	// A commit whose sync failed is stored before its wait ends: a reader
	// that starts from it, or from a later one, after its Commit returned
	// (before the DB's refusal is set) is refused here.
	if u := b.unsynced.Load(); u != nil && id >= int64(u.tx) {
		return u
	}
	return nil
}

// awaitCommit waits until the sync of transaction id has returned (or
// its Commit failed), or ctx ends.
func (b *boltBackend) awaitCommit(ctx context.Context, id int64) error {
	b.waiters.Add(1)
	defer b.waiters.Add(-1)
	b.waitMu.Lock()
	if b.syncing.Load() != id {
		b.waitMu.Unlock()
		return nil
	}
	if b.synced == nil {
		b.synced = make(chan struct{})
	}
	synced := b.synced
	b.waitMu.Unlock()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read runs fn in a read transaction that settle let through, and rolls
// it back however fn returns.
func (b *boltBackend) read(ctx context.Context, fn func(*bolt.Tx) error) error {
	t, err := b.begin(false)
	if err != nil {
		return closedErr(err)
	}
	defer func() { _ = t.Rollback() }()
	if err := b.settle(ctx, t); err != nil {
		return err
	}
	return fn(t)
}

// liveTx returns the ID of the transaction a reader starts from now (the
// last commit), -1 if none can start.
func (b *boltBackend) liveTx() int {
	t, err := b.begin(false)
	if err != nil {
		return -1
	}
	defer func() { _ = t.Rollback() }()
	return t.ID()
}

// unsyncedCommit is the error of a commit whose meta page was written and
// whose sync then failed (boltBackend.update).
type unsyncedCommit struct {
	tx  int
	err error
}

func (e *unsyncedCommit) Error() string {
	return fmt.Sprintf("the sync of transaction %d's commit failed after its meta page was written: %v", e.tx, e.err)
}

func (e *unsyncedCommit) Unwrap() error { return e.err }

// again runs fn in tx, a run that repeats one rolled back or void
// (package internal/rerun).
func again(fn func(Tx) error, tx Tx) error {
	rerun.Begin()
	defer rerun.End()
	return fn(tx)
}

// errFirstRun rolls back the first run of a write in a build with
// -tags oncekv_rerun (package internal/rerun).
var errFirstRun = errors.New("kv: the first run of a rerun build, rolled back")

func (b *boltBackend) View(ctx context.Context, fn func(Tx) error) error {
	if rerun.Enabled { // a first run whose result is void (package internal/rerun)
		_ = b.read(ctx, func(t *bolt.Tx) error { return fn((*boltTx)(t)) })
		return b.read(ctx, func(t *bolt.Tx) error { return again(fn, (*boltTx)(t)) })
	}
	return b.read(ctx, func(t *bolt.Tx) error { return fn((*boltTx)(t)) })
}

// view is DB.View on bbolt: bbolt's View without its closure, the read
// path's fixed cost (a replay's transaction); read's body, inline, for
// the same reason. fn gets the guarded Tx, and the transaction rolls back
// however fn returns, a panic included.
func (b *boltBackend) view(ctx context.Context, fn func(Tx) error) error {
	if rerun.Enabled { // a first run whose result is void (package internal/rerun)
		_ = b.read(ctx, func(t *bolt.Tx) error { return fn((*guardedBolt)(t)) })
		return b.read(ctx, func(t *bolt.Tx) error { return again(fn, (*guardedBolt)(t)) })
	}
	t, err := b.begin(false)
	if err != nil {
		return closedErr(err)
	}
	defer func() { _ = t.Rollback() }()
	if err := b.settle(ctx, t); err != nil {
		return err
	}
	return fn((*guardedBolt)(t))
}

func (b *boltBackend) Traits() Traits {
	return Traits{Name: "bbolt", SingleWriter: true, GroupCommit: true}
}

func (b *boltBackend) Close() error {
	if !b.owned {
		return nil
	}
	if b.locked.Load() {
		return errLocked
	}
	return b.db.Close()
}

// errLocked is Close's error once a read fault as bbolt began a
// transaction left one of its locks held (begin).
var errLocked = errors.New("the file stays open, and locked, until the process ends: a read of it faulted as bbolt began a transaction, after bbolt had taken a lock that it now never gives back")

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
// Open or Wrap, which writes the format record. Like a DB's transactions,
// the result refuses oncekv's reserved bucket names.
func WrapTx(tx *bolt.Tx) Tx { return guard((*boltTx)(tx)) }

// BoltTx returns the bbolt transaction behind tx, or nil if tx is not backed
// by bbolt. Use it to mix oncekv calls with code written against bbolt. A Tx
// that wraps another (a DB's transactions, the HTTP middleware's write
// tracker) offers an Unwrap() Tx method, which BoltTx follows.
func BoltTx(tx Tx) *bolt.Tx {
	for {
		switch t := tx.(type) {
		case *boltTx:
			return (*bolt.Tx)(t)
		case *guardedBolt:
			return (*bolt.Tx)(t)
		case interface{ Unwrap() Tx }:
			tx = t.Unwrap()
		default:
			return nil
		}
	}
}

func (t *boltTx) bolt() *bolt.Tx { return (*bolt.Tx)(t) }

func (t *boltTx) Bucket(name []byte) Bucket { return wrapBucket(t.bolt().Bucket(name)) }

func (t *boltTx) CreateBucketIfNotExists(name []byte) (Bucket, error) {
	b, err := t.bolt().CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	return (*boltBucket)(b), nil
}

func (t *boltTx) Cursor() Cursor     { return (*boltCursor)(t.bolt().Cursor()) }
func (t *boltTx) Writable() bool     { return t.bolt().Writable() }
func (t *boltTx) OnCommit(fn func()) { t.bolt().OnCommit(fn) }

func wrapBucket(b *bolt.Bucket) Bucket {
	if b == nil {
		return nil // a nil *boltBucket in an interface would not compare equal to nil
	}
	return (*boltBucket)(b)
}

func (b *boltBucket) bolt() *bolt.Bucket { return (*bolt.Bucket)(b) }

func (b *boltBucket) Get(key []byte) []byte         { return b.bolt().Get(key) }
func (b *boltBucket) Put(key, value []byte) error   { return b.bolt().Put(key, value) }
func (b *boltBucket) Delete(key []byte) error       { return b.bolt().Delete(key) }
func (b *boltBucket) Cursor() Cursor                { return (*boltCursor)(b.bolt().Cursor()) }
func (b *boltBucket) NextSequence() (uint64, error) { return b.bolt().NextSequence() }

func (c *boltCursor) bolt() *bolt.Cursor                { return (*bolt.Cursor)(c) }
func (c *boltCursor) First() ([]byte, []byte)           { return c.bolt().First() }
func (c *boltCursor) Last() ([]byte, []byte)            { return c.bolt().Last() }
func (c *boltCursor) Next() ([]byte, []byte)            { return c.bolt().Next() }
func (c *boltCursor) Prev() ([]byte, []byte)            { return c.bolt().Prev() }
func (c *boltCursor) Seek(seek []byte) ([]byte, []byte) { return c.bolt().Seek(seek) }

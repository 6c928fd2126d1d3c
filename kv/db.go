package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv/internal/atomicfile"
	"github.com/oncekv/oncekv/internal/failpoint"
	"github.com/oncekv/oncekv/internal/goid"
	"github.com/oncekv/oncekv/internal/rerun"
	"github.com/oncekv/oncekv/observe"
	"github.com/oncekv/oncekv/seal"
)

// Defaults used when the corresponding Options field is zero (each field's
// comment gives its value).
const (
	defaultLockTimeout              = time.Second
	defaultFileMode     os.FileMode = 0o600
	defaultMaxBatchSize             = 1000
)

// Options configure Open. A nil *Options means all defaults.
type Options struct {
	// LockTimeout is how long Open waits for the file lock held by another
	// process before failing with a *FileError (ErrLocked). 0 means one
	// second. Negative values are invalid.
	LockTimeout time.Duration

	// ReadOnly opens the file with a shared lock; writes fail (with
	// bbolt's errors.ErrDatabaseReadOnly, whatever the backend). Read-only
	// opens never stamp the format record.
	ReadOnly bool

	// Observer, if set, receives what the packages built on this database
	// report (package observe): commits here, request outcomes in the
	// ledger, intents, the relay, the inbox, sweeps. nil costs nothing.
	Observer *observe.Observer

	// Cipher, if set, encrypts what the packages built on this database
	// store on the caller's behalf (package seal): stored responses, intent
	// payloads and results, outbox payloads, and conditional tables that opt
	// in. Values sealed under any key of the ring open; new ones use its
	// current key. The keys are never stored in the database.
	Cipher *seal.Ring

	// NoSync skips fsync on commit. A crash can then lose or corrupt recent
	// transactions: use it only for tests and benchmarks.
	NoSync bool

	// Clock supplies the time for leases, expiry and retention. nil means
	// the system clock (time.Now).
	Clock Clock

	// MaxBatchSize bounds the number of calls grouped by Batch into one
	// transaction, those it takes in while it runs included. 0 means 1000.
	MaxBatchSize int

	// MaxBatchDelay is how long a batch may wait for more calls before it
	// commits. 0, the default, commits as soon as the writer is idle: under
	// load batches grow by themselves, and a lone caller pays no delay.
	MaxBatchDelay time.Duration

	// GatherCallers makes a batch wait for the callers the previous batch
	// answered, when they call Batch again, so that a fixed pool of
	// workers (a consumer's goroutines, a closed-loop client) commits in
	// one batch. Without it, batches settle below the pool's size: while a
	// batch commits, the callers not in it queue and form the next, and
	// the groups take turns, each paying a commit (a batch takes in the
	// callers that arrive while its functions run, not those that arrive
	// during its fsync). The wait ends when they are all queued, or after
	// half of the previous batch's commit time (5 ms at most); a wait that
	// times out turns waiting off for the next batches (1, 2, 4, up to 64
	// of them), so callers that do not come back (an open stream of
	// independent requests) cost little. A lone caller never waits. It
	// cannot be combined with MaxBatchDelay.
	GatherCallers bool

	// FileMode is the permission of a newly created file. 0 means 0600.
	FileMode os.FileMode

	// SyncFreelist makes every commit write bbolt's list of free pages to
	// the file, as bbolt does by default. oncekv writes it only when the
	// database closes (bbolt's NoFreelistSync while open, as etcd runs
	// it): a commit then no longer sorts and writes a list that grows with
	// the file's history. On a file of 200k orders that list was about
	// half of a one-write transaction's time (bench/README.md). A file
	// closed cleanly opens as fast as before; one whose process died
	// without closing it has no list, and the next writable open rebuilds
	// it by walking every page, after oncekv has walked the file itself to
	// refuse a damaged one (0.82 s instead of 0.59 s to open 1M records,
	// warm). Files stay compatible with bbolt and older oncekv either way.
	SyncFreelist bool

	// InitialMmapSize is passed to bbolt: a larger initial mapping avoids
	// remapping (which blocks readers) as the file grows. 0 uses bbolt's default.
	InitialMmapSize int

	// RequireFormat opens only a file that already holds an oncekv format
	// record: a missing or empty file, or another application's bbolt file,
	// fails with a *FileError (ErrNotDatabase) and is neither created nor
	// changed. Maintenance tools set it, so they never adopt a foreign file.
	RequireFormat bool

	// RecentCacheBytes bounds the cache of recent records: the records
	// this process committed last, kept in memory so that a retry, which
	// comes seconds after the request it repeats, is answered without a
	// read transaction. The bound holds for each kind of record (the
	// ledger's records, the inbox's marks), and a record over a 256th of
	// it is not kept. 0 means DefaultRecentCacheBytes (16 MiB). A negative
	// value turns the cache off: retries read the file, and the write path
	// does no caching work (a few percent of a CPU-bound service's time).
	// bbolt only: the etcd backend keeps no cache.
	RecentCacheBytes int

	// CheckNesting makes Update and Batch return ErrNestedTx when they are
	// called from inside a write transaction's function of this database,
	// on the goroutine that runs it, whatever their context: a managed call
	// (ledger.Do, conditional's Upsert...) inside the caller's own Update,
	// which would wait for ever for the writer its caller holds, and every
	// write of the process with it. Without it only a context marked by
	// WithinTx is caught (idemhttp marks its handlers'). It costs a look
	// at the goroutine's stack, a few microseconds, once a write
	// transaction and at each write call made while one runs: turn it on
	// in tests (kvtest does) and while debugging, as bbolt's StrictMode.
	// One writer only (bbolt): on a backend with several writers a nested
	// write does not wait. A write inside a transaction of bbolt's own
	// (DB.Bolt().Update) is not seen. The rerun test build (-tags
	// oncekv_rerun) turns it on for every database.
	CheckNesting bool
}

// DefaultRecentCacheBytes is the bound of the cache of recent records
// (Options.RecentCacheBytes) per kind of record.
const DefaultRecentCacheBytes = 16 << 20

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.LockTimeout == 0 {
		r.LockTimeout = defaultLockTimeout
	}
	if r.Clock == nil {
		r.Clock = systemClock{}
	}
	if r.MaxBatchSize == 0 {
		r.MaxBatchSize = defaultMaxBatchSize
	}
	if r.FileMode == 0 {
		r.FileMode = defaultFileMode
	}
	if r.RecentCacheBytes == 0 {
		r.RecentCacheBytes = DefaultRecentCacheBytes // negative stays: off (DB.RecentCacheBytes)
	}
	if rerun.Enabled {
		// The test build that runs every function twice checks nesting
		// too, for every database, however a test (an example's, the
		// CLI's) opened it.
		r.CheckNesting = true
	}
	return r
}

func (o *Options) validate() error {
	switch {
	case o.LockTimeout < 0:
		return fmt.Errorf("%w: LockTimeout %s is negative", ErrInvalidOptions, o.LockTimeout)
	case o.MaxBatchSize < 0:
		return fmt.Errorf("%w: MaxBatchSize %d is negative", ErrInvalidOptions, o.MaxBatchSize)
	case o.MaxBatchDelay < 0:
		return fmt.Errorf("%w: MaxBatchDelay %s is negative", ErrInvalidOptions, o.MaxBatchDelay)
	case o.GatherCallers && o.MaxBatchDelay > 0:
		return fmt.Errorf("%w: GatherCallers and MaxBatchDelay exclude each other: choose one way to wait for company", ErrInvalidOptions)
	case o.InitialMmapSize < 0:
		return fmt.Errorf("%w: InitialMmapSize %d is negative", ErrInvalidOptions, o.InitialMmapSize)
	}
	return nil
}

// DB is an open oncekv database: a backend (a bbolt file by default) plus
// the clock, the group committer and the identity of this process's
// incarnation. It is safe for concurrent use.
type DB struct {
	backend  Backend
	traits   Traits
	bolt     *bolt.DB // nil unless the backend is bbolt
	pageSize int      // bbolt's page size, read at open (0 for other backends)
	// file describes bbolt's file as it was at open (nil for other
	// backends, or when it could not be read), for IsFault and the
	// register of files this process has open.
	file        os.FileInfo
	path        string
	opts        Options
	incarnation uuid.UUID
	batch       batcher
	closed      atomic.Bool
	closeDone   chan struct{} // closed when the first Close has closed the database
	closeErr    error         // its error, read after closeDone
	// failed is the error every call returns after a commit whose sync
	// failed once its meta page was written (ErrSyncFailed), or a read of
	// the file that faulted (ErrReadFailed); nil before (fail sets it).
	failed atomic.Pointer[error]
	// space pauses the commits of a bbolt file after one failed for lack
	// of space (space.go).
	space noSpace
	// refusing is closed (once, refuseOnce) when Err first returns an
	// error: at Close, or at the failure above (Done).
	refusing   chan struct{}
	refuseOnce sync.Once
	attached   sync.Map
	// detached is set once the attached values are closed: at the
	// failure above, or at Close. attachMu orders that with an attachment
	// made meanwhile, which is then closed once, by one of them.
	attachMu sync.Mutex
	detached bool
	// turn is the writer's turn (one writer: a buffer of one), taken by
	// every write transaction this DB runs before the backend's own lock,
	// so that a caller whose ctx ends while it waits gives up its place;
	// writerSince is when its holder took it, turnWaiting how many wait
	// for it (writer.go). nil and 0 on a backend with several writers.
	turn        chan struct{}
	writerSince atomic.Int64
	turnWaiting atomic.Int64
	// turnHolder is the goroutine that holds the turn, 0 for none: kept
	// with Options.CheckNesting only.
	turnHolder atomic.Uint64
}

// Open opens (creating if needed) the bbolt file at path with oncekv's
// defaults: mode 0600, a bounded wait for the file lock, the hashmap
// freelist, and the format check. A file locked by another process fails
// with a *FileError wrapping ErrLocked after Options.LockTimeout; a file
// from a newer format fails with ErrNewerFormat and is not modified.
func Open(path string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	openFiles.mu.Lock() // held across the open: two Opens of one file cannot race
	defer openFiles.mu.Unlock()
	if other := alreadyOpen(path); other != nil {
		return nil, &FileError{Path: path, Err: ErrLocked, Reason: "is already open in this process: open it once and share the *kv.DB"}
	}
	size, err := preflight(path, o.ReadOnly)
	switch {
	case err != nil:
		return nil, err
	case size == 0 && (o.ReadOnly || o.RequireFormat):
		if _, serr := os.Stat(path); serr != nil {
			return nil, fmt.Errorf("kv: open %s: %w", path, serr)
		}
		return nil, &FileError{Path: path, Err: ErrNotDatabase, Reason: "is empty (0 bytes): not a database yet"}
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist) && !o.ReadOnly
	start := time.Now()
	b, err := boltOpen(path, o)
	if errors.Is(err, berrors.ErrTimeout) {
		mode := "read-write"
		if o.ReadOnly {
			mode = "read-only"
		}
		return nil, &FileError{Path: path, Err: ErrLocked, Cause: err, Reason: fmt.Sprintf(
			"is locked: opening it %s, the file lock was held by another process after waiting %s; "+
				"bbolt allows one writing process per file: stop that process, or inspect it live through its admin endpoint",
			mode, time.Since(start).Round(time.Millisecond))}
	}
	if errors.Is(err, fs.ErrPermission) && !o.ReadOnly {
		return nil, fmt.Errorf("kv: open %s for writing: %w (open it read-only, or fix the file's permissions)", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: open %s: %w", path, err)
	}
	if created && !o.NoSync {
		// bbolt syncs the new file, not its name: without this, a power
		// cut could take the file, and every commit in it, away.
		if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("kv: open %s: sync the directory of the new file: %w", path, err)
		}
	}
	b.MaxBatchSize = o.MaxBatchSize
	db, err := newBoltDB(b, path, o)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	register(db)
	return db, nil
}

// boltOpen is bolt.Open with bbolt's assertion panics and memory faults on a
// damaged file reported as a *FileError instead of killing the process.
func boltOpen(path string, o Options) (b *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("cannot be opened: bbolt failed on its structure: %v", r)}
		}
	}()
	return bolt.Open(path, o.FileMode, &bolt.Options{
		Timeout:         o.LockTimeout,
		ReadOnly:        o.ReadOnly,
		NoSync:          o.NoSync,
		NoGrowSync:      o.NoSync,
		NoFreelistSync:  !o.SyncFreelist,
		FreelistType:    bolt.FreelistMapType,
		InitialMmapSize: o.InitialMmapSize,
	})
}

// Wrap prepares a caller's own open bbolt handle for oncekv: it checks and,
// if the handle is writable, stamps the format record. Options that only
// apply to opening a file (LockTimeout, ReadOnly, NoSync, FileMode,
// InitialMmapSize) are ignored. Close on the returned DB does not close b.
//
// Wrap a handle once per process: each DB carries its own incarnation ID,
// and two DBs over one handle would treat each other's claims as orphans.
//
// Unlike Open, Wrap does not walk the file before bbolt uses it (bbolt has
// opened it already): a damaged file reaches bbolt as it is. DB.Check
// reports damage on a handle of any kind.
func Wrap(b *bolt.DB, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.ReadOnly = b.IsReadOnly()
	return newDB(newBoltBackend(b, false), b, b.Path(), o)
}

// New returns a DB over any Backend (package etcdkv provides one). It checks
// the stored format record and, unless Options.ReadOnly or RequireFormat is
// set, stamps a store that has none. Options that only apply to a bbolt
// file are ignored. Close on the DB closes the backend; when New fails,
// the backend is left open for the caller to close.
func New(b Backend, opts *Options) (*DB, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil Backend", ErrInvalidOptions)
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	return newDB(b, nil, b.Traits().Name, o)
}

func newDB(b Backend, bdb *bolt.DB, path string, o Options) (*DB, error) {
	db := &DB{backend: b, traits: b.Traits(), bolt: bdb, path: path, opts: o, incarnation: uuid.New(), closeDone: make(chan struct{}), refusing: make(chan struct{})}
	db.space.minWait, db.space.maxWait = noSpaceMinWait, noSpaceMaxWait
	if bdb != nil {
		db.pageSize = bdb.Info().PageSize // nothing else uses bdb yet: see PageSize
		db.file, _ = os.Stat(path)        // nil: IsFault takes every fault as the file's
	}
	if err := db.checkFormat(); err != nil {
		return nil, err
	}
	db.batch.db = db
	db.batch.full = make(chan struct{}, 1)
	db.batch.txFn = db.batch.runTx
	db.batch.callsFn = func() int { return len(db.batch.batch) }
	db.batch.maxWait = maxGatherWait
	if db.traits.SingleWriter {
		db.turn = make(chan struct{}, 1)
	}
	if bdb != nil && o.Cipher != nil {
		boltCiphers.Store(bdb, o.Cipher)
	}
	return db, nil
}

// newBoltDB is newDB over a bbolt file Open opened, with bbolt's panics
// and memory faults on a damaged page met while the format record is read
// or stamped (the root page, the buckets under it) reported as a
// *FileError instead of escaping Open. bbolt rolls back a transaction a
// panic leaves, so the caller can close b.
func newBoltDB(b *bolt.DB, path string, o Options) (db *DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("cannot be opened: bbolt failed on its structure reading the format record: %v", r)}
		}
	}()
	return newDB(newBoltBackend(b, true), b, path, o)
}

// Close closes the database. Calls made after Close fail with ErrClosed.
// Close waits for running transactions to finish: a write whose function
// never returns (a handler blocked inside its transaction) keeps it
// waiting for ever; CloseContext bounds the wait. After a read of the
// file faulted as bbolt began a transaction (ErrReadFailed; bbolt reads
// its meta pages then, holding a lock it never gives back), Close returns
// at once with an error matching ErrReadFailed, and the file stays open,
// and locked, until the process ends. A second Close waits for the first
// and returns its error.
func (db *DB) Close() error { return db.CloseContext(context.Background()) }

// CloseContext is Close with the wait for running transactions bounded
// by ctx. When ctx ends first it returns an error matching ctx.Err() that
// says how long the writer has been held; the database is closed to new
// calls all the same (they fail with ErrClosed), and closes once the
// transactions end, if the process lives that long. A service's shutdown
// uses it after http.Server.Shutdown, with what is left of its grace
// period: a process that exits without closing loses nothing committed
// (the next open reads the file as after a crash), where one that hangs
// is killed at the end of its grace period anyway.
func (db *DB) CloseContext(ctx context.Context) error {
	if db.closed.CompareAndSwap(false, true) {
		db.refuse()
		if ctx.Done() == nil {
			db.close()
		} else {
			go db.close()
		}
	}
	select {
	case <-db.closeDone: // first: closed already answers so, whatever ctx
		return db.closeErr
	default:
	}
	select {
	case <-db.closeDone:
		return db.closeErr
	case <-ctx.Done():
		return fmt.Errorf("kv: close %s: %w while transactions run (the writer held for %s); it closes when they end", db.path, ctx.Err(), db.Writer().Held.Round(time.Millisecond))
	}
}

// close closes the database, once, recording its error for every Close.
func (db *DB) close() {
	defer close(db.closeDone)
	db.closeErr = db.closeBackend()
}

// closeBackend is close's work: the attached values, bbolt's freelist,
// the backend.
func (db *DB) closeBackend() error {
	defer unregister(db)
	db.detach()
	var err error
	if db.bolt != nil {
		boltCiphers.CompareAndDelete(db.bolt, db.opts.Cipher)
		if db.failed.Load() == nil { // else nothing more is written: the open after reads the disk's state
			err = db.writeFreelist()
		}
	}
	cerr := db.backend.Close()
	if f := db.failed.Load(); f != nil && errors.Is(cerr, errLocked) {
		cerr = fmt.Errorf("%w: %w", cerr, *f)
	}
	if cerr != nil {
		cerr = fmt.Errorf("kv: close %s: %w", db.path, cerr)
	}
	return errors.Join(err, cerr)
}

// detach closes the attached values that are io.Closers, once, so that
// state kept beside the database stops answering.
func (db *DB) detach() {
	db.attachMu.Lock()
	defer db.attachMu.Unlock()
	if db.detached {
		return
	}
	db.detached = true
	db.attached.Range(func(_, v any) bool {
		if c, ok := v.(io.Closer); ok {
			_ = c.Close()
		}
		return true
	})
}

// syncFailed makes the DB refuse every call from now on, after the commit
// u whose sync failed once its meta page was written, and returns that
// commit's error. It runs in the writer's turn, before the next write can
// start from that commit.
func (db *DB) syncFailed(u *unsyncedCommit) error {
	_ = db.fail(&syncError{path: db.path, commit: u, refusal: true}) // the call whose commit failed gets its own error
	return &syncError{path: db.path, commit: u}
}

// fail makes the DB refuse every call from now on with refusal, unless an
// earlier failure set its own, and returns the refusal that stands.
func (db *DB) fail(refusal error) error {
	db.failed.CompareAndSwap(nil, &refusal)
	db.refuse()
	db.detach()
	return *db.failed.Load()
}

// catchFault, deferred (with debug.SetPanicOnFault set) by a
// transaction on bbolt's memory map, turns a memory fault on the file
// raised in it (DB.IsFault: a page the disk could not read) into *err, the
// DB's refusal from then on (ErrReadFailed), instead of the runtime's end
// of the process. Any other panic goes on, a fault elsewhere included.
func (db *DB) catchFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if !db.IsFault(r) {
		panic(r)
	}
	*err = db.readFaulted(r.(runtime.Error))
}

// IsFault reports whether v, a value recover returned, is a memory fault
// (the Go runtime's error with the faulting address, raised as a panic
// while debug.SetPanicOnFault is set, as it is in this package's
// transactions). Inside a transaction, such a fault is most often a page
// of the database the disk could not read; DB.IsFault tells whether it
// was. Code that recovers panics inside a transaction's function (a
// handler's, a hook's) should panic again with a fault of the DB's file:
// kv then refuses the database (ErrReadFailed) and answers the call so,
// where a recovered fault would leave it serving on a disk that fails its
// reads.
func IsFault(v any) bool {
	_, ok := faultAddr(v)
	return ok
}

// IsFault reports whether v, a value recover returned, is a memory fault
// (package IsFault) on this database's file: a page the disk could not
// read, or that was cut from the file beneath the process. kv refuses the
// database after such a fault (ErrReadFailed); a fault elsewhere (your
// code's own memory map, say) goes on as the panic it is, and the
// database goes on serving.
//
// On Linux it looks the address up in /proc/self/maps. Elsewhere, and when
// it cannot tell (an address in no mapping: bbolt may have remapped the
// file since), every fault counts as the file's: a database that
// refuses calls is safer than one serving on a disk that fails its reads.
// A DB over another backend (etcd) has no file, and no fault is its.
func (db *DB) IsFault(v any) bool {
	addr, ok := faultAddr(v)
	if !ok || db.bolt == nil {
		return false
	}
	if db.file == nil {
		return true
	}
	yes, known := mappedFrom(db.file, addr)
	return yes || !known
}

// faultAddr returns the faulting address of v, if v is a memory fault.
func faultAddr(v any) (uintptr, bool) {
	e, ok := v.(interface{ Addr() uintptr })
	if _, rt := v.(runtime.Error); !ok || !rt {
		return 0, false
	}
	return e.Addr(), true
}

// readFaulted makes the DB refuse every call from now on, after fault
// (IsFault) reading its file, and returns the refusal.
func (db *DB) readFaulted(fault runtime.Error) error {
	return db.fail(&readError{path: db.path, fault: fault})
}

// readError is the refusal after a memory fault reading the file
// (ErrReadFailed).
type readError struct {
	path  string
	fault runtime.Error
}

func (e *readError) Error() string {
	return fmt.Sprintf("kv: %s refuses every call since reading its file failed (%v: the disk failed a read, or the file was cut short beneath the process): close it and open it again, the open checks the file", e.path, e.fault)
}

func (e *readError) Unwrap() error { return ErrReadFailed }

// syncError is the error of a commit whose sync failed after its meta page
// was written, and (refusal) of the calls after it (ErrSyncFailed).
type syncError struct {
	path    string
	commit  *unsyncedCommit
	refusal bool
}

func (e *syncError) Error() string {
	if e.refusal {
		return fmt.Sprintf("kv: %s refuses every call since the sync of transaction %d's commit failed after its meta page was written (%v): close it and open it again, the open reads what the file on the disk holds", e.path, e.commit.tx, e.commit.err)
	}
	return fmt.Sprintf("kv: %s: commit outcome unknown: %v", e.path, e.commit)
}

// Unwrap returns ErrSyncFailed and the sync's error; and for the commit's
// own error ErrCommitUnknown.
func (e *syncError) Unwrap() []error {
	if e.refusal {
		return []error{ErrSyncFailed, e.commit.err}
	}
	return []error{ErrCommitUnknown, ErrSyncFailed, e.commit.err}
}

// writeFreelist writes bbolt's freelist into a file this DB opened for
// writing without it (Options.SyncFreelist false), in one last commit, so
// that the next open reads the list instead of walking the file. It flips
// bbolt's setting inside the transaction, under the writer lock that every
// commit reading it holds. After a panic in a commit, whose list in
// memory may lack pages (boltBackend.write), it writes nothing: the next
// open builds the list from the file's pages.
func (db *DB) writeFreelist() error {
	b, ok := db.backend.(*boltBackend)
	if !ok || !b.owned || db.bolt.IsReadOnly() || db.opts.SyncFreelist || b.freelistShort.Load() {
		return nil
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		tx.DB().NoFreelistSync = false
		return nil
	})
	if err != nil {
		return fmt.Errorf("kv: close %s: writing the freelist (the next open rebuilds it): %w", db.path, err)
	}
	return nil
}

// Path returns the database file's path (for another backend, its name).
func (db *DB) Path() string { return db.path }

// PageSize returns the bbolt file's page size, 0 for other backends. Use it
// instead of Bolt().Info(): bbolt's Info reads the memory map without a
// lock, and a commit that grows the file remaps it meanwhile (a data race,
// and a fault when the old map is gone).
func (db *DB) PageSize() int { return db.pageSize }

// Bolt returns the underlying bbolt handle, for code that wants to use bbolt
// directly alongside oncekv; nil when the backend is not bbolt.
func (db *DB) Bolt() *bolt.DB { return db.bolt }

// Traits returns the backend's traits (see Traits).
func (db *DB) Traits() Traits { return db.traits }

// Attachment returns the value attached to db under key, creating it with
// create on first use. Packages built on kv keep per-database state there
// (the record store's open flag), so that every handle they make over one
// DB shares it. key should be a value of an unexported type.
// When db closes, or starts refusing calls after a failed sync, every
// attached value that is an io.Closer is closed (before the backend), so
// state kept beside the database can stop answering; one attached after
// that is closed at once.
func (db *DB) Attachment(key any, create func() any) any {
	if v, ok := db.attached.Load(key); ok {
		return v
	}
	nv := create() // outside the lock: create may attach something itself
	db.attachMu.Lock()
	defer db.attachMu.Unlock()
	v, loaded := db.attached.LoadOrStore(key, nv)
	if c, ok := v.(io.Closer); ok && !loaded && db.detached {
		_ = c.Close()
	}
	return v
}

// Clock returns the configured Clock.
func (db *DB) Clock() Clock { return db.opts.Clock }

// Incarnation identifies this open of the database. Records that claim work
// (leases) carry it; a claim whose incarnation differs from the current one
// was left by a process that has since died, because bbolt's file lock lets
// only one process at a time open the file for writing.
func (db *DB) Incarnation() uuid.UUID { return db.incarnation }

// ReadOnly reports whether the database was opened read-only.
func (db *DB) ReadOnly() bool { return db.opts.ReadOnly }

// RecentCacheBytes returns the bound of the cache of recent records per
// kind of record (Options.RecentCacheBytes, its default applied), or 0
// when the cache is off.
func (db *DB) RecentCacheBytes() int { return max(db.opts.RecentCacheBytes, 0) }

// Update runs fn in a read-write transaction and commits it if fn returns
// nil. If fn returns an error or panics, the transaction is rolled back and
// the error returned (or the panic propagated). A ctx that ends while the
// call waits for the writer (behind a transaction that holds it long)
// cancels it: Update returns ctx.Err(), and fn never runs. A running
// transaction is not interrupted.
func (db *DB) Update(ctx context.Context, fn func(Tx) error) error {
	if err := db.writable(ctx); err != nil {
		return err
	}
	err := db.commit(ctx, oneCall, func(t Tx) error {
		if err := fn(db.guard(t)); err != nil {
			return err
		}
		failpoint.Inject(failpoint.KVUpdateBeforeCommit)
		return nil
	})
	if err == nil {
		failpoint.Inject(failpoint.KVUpdateAfterCommit)
	}
	return closedErr(unreject(err))
}

// Hold runs fn in a write transaction that is always rolled back: fn
// reads with the writer held, so that nothing commits while it reads (a
// store rebuilding its in-memory index from the file). It is Update in
// all else (faults are refused as there) but commits nothing, and the
// Observer hears of no commit. fn must not write. Hold returns fn's error.
func (db *DB) Hold(ctx context.Context, fn func(Tx) error) error {
	if err := db.writable(ctx); err != nil {
		return err
	}
	var fnErr error
	err := db.commit(ctx, nil, func(t Tx) error {
		if fnErr = fn(db.guard(t)); fnErr != nil {
			return fnErr
		}
		return errHeld
	})
	switch {
	case fnErr != nil:
		return fnErr
	case errors.Is(err, errHeld):
		return nil
	}
	return closedErr(err)
}

// errHeld rolls Hold's transaction back.
var errHeld = errors.New("kv: held, rolled back")

// View runs fn in a read-only transaction. Views run concurrently with each
// other and with one writer.
func (db *DB) View(ctx context.Context, fn func(Tx) error) (err error) {
	if err := db.usable(ctx); err != nil {
		return err
	}
	if b, ok := db.backend.(*boltBackend); ok {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer db.catchFault(&err)
		return db.readFailure(b.view(ctx, fn))
	}
	return closedErr(db.backend.View(ctx, func(t Tx) error { return fn(db.guard(t)) }))
}

// commit runs fn in one write transaction of the backend, reporting it to
// the observer (Options.Observer) if one listens: calls is how many calls
// group commit put in it (read once the transaction is over: a batch takes
// in calls while it runs), nil for Hold's transaction, which commits
// nothing and is not reported.
func (db *DB) commit(ctx context.Context, calls func() int, fn func(Tx) error) (err error) {
	if db.turn != nil {
		if err := db.takeTurn(ctx); err != nil {
			return err
		}
		defer db.giveTurn() // a panic in fn or in the commit included
		// A write that came in before a commit's sync failed, and waited
		// for the turn while it failed, would commit on top of what the
		// disk may not hold: the refusal is set within the failed
		// commit's turn, and read here, within this one.
		if f := db.failed.Load(); f != nil {
			return *f
		}
		if db.opts.CheckNesting {
			db.turnHolder.Store(goid.ID())
			defer db.turnHolder.Store(0) // before the turn is given
		}
	}
	if db.bolt != nil {
		// A fault in fn (Update's; Batch's functions are caught where
		// they run, runTx) or in bbolt's commit, caught before the turn
		// is given: the refusal is set within it.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer db.catchFault(&err)
	}
	o := db.opts.Observer
	if calls == nil { // Hold: no commit
		return db.failure(db.backend.Update(ctx, fn))
	}
	if db.bolt != nil {
		// Within the turn: the pause is set and ended within the turns of
		// the commits that decide it.
		if err := db.space.refusal(db.path); err != nil {
			return err
		}
	}
	observed := o != nil && o.Commit != nil
	var btx *bolt.Tx
	var last Tx // the backend's transaction of the last run of fn
	var start time.Time
	if observed {
		start = time.Now()
		err = db.failure(db.backend.Update(ctx, func(t Tx) error {
			btx, last = BoltTx(t), t
			return fn(t)
		}))
	} else {
		err = db.failure(db.backend.Update(ctx, fn))
	}
	if db.bolt != nil {
		db.space.record(db.path, err, &db.writerSince)
	}
	if !observed {
		return err
	}
	if w, ok := last.(wroter); ok && err == nil && !w.Wrote() {
		return nil // it sent nothing to commit: no commit to report
	}
	e := observe.Commit{Calls: calls(), Duration: time.Since(start), Err: err != nil}
	if btx != nil {
		st := btx.Stats() // this transaction's own: its write and fsync time
		e.Write = st.GetWriteTime()
	}
	o.Commit(e)
	return err
}

// failure returns err, the error of a write transaction, turning a commit
// whose sync failed after its meta page was written into the DB's
// failure (syncFailed).
func (db *DB) failure(err error) error {
	if err == nil {
		return nil
	}
	var u *unsyncedCommit // escapes (errors.As): declared off the path that commits
	if errors.As(err, &u) {
		return db.syncFailed(u)
	}
	return err
}

// readFailure returns err, the error of a read, turning the failed sync
// of a commit the read waited for (boltBackend.settle) into the DB's
// refusal, which the commit's own call reports as well.
func (db *DB) readFailure(err error) error {
	if err == nil {
		return nil
	}
	var u *unsyncedCommit
	if errors.As(err, &u) {
		_ = db.syncFailed(u)
		return db.Err()
	}
	return err
}

// oneCall is the call count of a commit that is not a batch's.
func oneCall() int { return 1 }

// Observer returns the observer set in Options.Observer (nil if none):
// the packages built on kv report to it.
func (db *DB) Observer() *observe.Observer { return db.opts.Observer }

// writable is usable for a write: a read-only DB over a backend other
// than bbolt (which refuses by itself) refuses here.
func (db *DB) writable(ctx context.Context) error {
	if db.opts.ReadOnly && db.bolt == nil {
		return fmt.Errorf("kv: %s was opened read-only: %w", db.path, berrors.ErrDatabaseReadOnly)
	}
	if db.nested(ctx) || (db.opts.CheckNesting && db.heldHere()) {
		return ErrNestedTx
	}
	return db.usable(ctx)
}

// heldHere reports whether this goroutine holds the writer's turn (kept
// with Options.CheckNesting). It reads the stack only when someone holds
// it.
func (db *DB) heldHere() bool {
	h := db.turnHolder.Load()
	return h != 0 && h == goid.ID()
}

func (db *DB) usable(ctx context.Context) error {
	if err := db.Err(); err != nil {
		return err
	}
	return ctx.Err()
}

// Err returns the error every call on db now fails with: ErrClosed once it
// is closed, an error matching ErrSyncFailed once a commit's sync has
// failed after its meta page was written, or ErrReadFailed once a page of
// the file could not be read; nil while it serves. A service's liveness
// check can report it: after ErrSyncFailed or ErrReadFailed the remedy is
// a restart (a reopen), which an orchestrator then does by itself.
func (db *DB) Err() error {
	if db.closed.Load() {
		return ErrClosed
	}
	if f := db.failed.Load(); f != nil {
		return *f
	}
	return nil
}

// Done returns a channel that is closed when db starts refusing calls:
// when Close is called, after a commit whose sync failed once its meta
// page was written, or after a page of the file could not be read. Err
// then says which. The background loops (the
// retention sweeper, the outbox relay, the intent reconciler) end on it
// at once, with Err's error, rather than at their next pass, an interval
// later; a service can select on it to exit, for its supervisor to
// restart it and the open to read what the disk holds.
func (db *DB) Done() <-chan struct{} { return db.refusing }

// refuse closes the channel Done returns, once.
func (db *DB) refuse() { db.refuseOnce.Do(func() { close(db.refusing) }) }

// closedErr reports bbolt's "database not open" (a Close raced the call) as
// ErrClosed, so callers meet one error for a closed database.
func closedErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

// Traits, Update, View and Close make a DB a Backend too, so that code
// written against the port (kvtest.RunConformance, another DB) can run
// over it.
var _ Backend = (*DB)(nil)

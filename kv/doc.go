// Package kv is the storage layer under every oncekv package: the small
// transactional port the rest of oncekv is written against, bbolt behind it
// as the embedded default, and managed and group-committed transactions on
// top.
//
// # Opening
//
// Open takes a path and an *Options (nil means defaults). The file is
// created with mode 0600; a file locked by another process fails after
// Options.LockTimeout with ErrLocked instead of hanging; a file written by a
// newer oncekv format fails with ErrNewerFormat and is left untouched; a
// damaged or foreign file fails with ErrDamaged or ErrNotDatabase, all in a
// *FileError that names the file and the problem.
//
//	db, err := kv.Open("app.db", nil)
//	if err != nil { ... }
//	defer db.Close()
//
// bbolt's list of free pages is written to the file once, when the DB
// closes, rather than at every commit (bbolt's NoFreelistSync while open,
// as etcd runs it): a commit on a file with history no longer sorts and
// writes a list that grows with it. A file left without the list (its
// process died) gets it back at its next writable open, which walks every
// page. Options.SyncFreelist restores bbolt's default.
//
// Every Open for writing walks the pages reachable from the root itself
// first, through a read-only map (about 0.2 s for a million records), and
// refuses a damaged file with ErrDamaged before bbolt meets the damage:
// bbolt's own walk runs in a goroutine where damage is an unrecoverable
// panic, and a page in use that the freelist lists as free would be
// overwritten by the next commit.
//
// A service that already holds a *bbolt.DB calls Wrap instead, and hands its
// own *bbolt.Tx to any oncekv call through WrapTx:
//
//	err := boltDB.Update(func(btx *bbolt.Tx) error {
//		// the caller's own bbolt code ...
//		_, err := ledger.DoTx(ctx, kv.WrapTx(btx), req, work)
//		return err
//	})
//
// Backup writes a copy of the file as of one read transaction while
// writes go on (BackupFile puts it at a new path, whole or not at all);
// Open opens the copy as it would the original.
//
// # The port
//
// Backend, Tx, Bucket and Cursor are the port: top-level buckets, get, put,
// delete, forward and backward cursors, sequences and a commit hook. A
// backend in another module implements them (package etcdkv does, over
// etcd) and New turns it into a DB; it is done when kvtest.RunConformance
// passes against it unchanged. Traits tells the layers above what they may
// rely on: SingleWriter is true for bbolt, whose file lock makes one process
// the only writer, so in-memory state (the ledger's key directory, its
// waiters, the incarnation that recovers a dead process's claims) sees every
// write; it is false for etcd, where several replicas write. A backend
// that counts events of its own (etcd's conflicts and lost answers)
// implements Counting, and DB.Counters hands the counts to metrics
// adapters that do not import it. RangeCursor bounds a cursor to a range
// of keys; a backend whose commits compare what was read (etcd) bounds
// its reads to it too (Ranger), so that a scan of one group of keys does
// not conflict with writes past it.
//
// # Transactions
//
// Every oncekv operation comes in two forms: one that takes the caller's Tx
// and never commits, and a managed one that opens the transaction itself
// with Update, View or Batch. Update and View roll back when the function
// returns an error or panics. Inside a write transaction, use its Tx: a
// managed write started there waits for the writer its own caller holds.
// A context marked by WithinTx (idemhttp marks its handlers') turns that
// wait into ErrNestedTx, and so does Options.CheckNesting for any context
// (a check for tests and debugging: it reads the goroutine's stack).
//
// Batch is group commit: concurrent callers share one transaction and one
// fsync. There is no fixed delay by default: a batch starts as soon as the
// writer is idle, callers that arrive while its functions run join it, and
// those that arrive during its commit form the next one. A function run
// under Batch may run more than once and must have no effect outside the
// transaction until Batch returns. Reject marks an outcome decided without
// writing (a mismatch, a key in use) so it does not fail the whole batch.
//
// A fixed set of callers that call again as soon as they are answered (a
// consumer's worker goroutines) settles, by those rules, into groups that
// take turns, each paying a commit: those answered by one commit call again
// while the next commits. Options.GatherCallers makes a batch wait for the
// previous batch's callers to come back, up to half that batch's commit
// time, so they commit once per round instead of twice (oncekv bench
// --gather shows the batch sizes, in its BATCH column).
//
// # When a commit fails
//
// A commit that fails before its meta page is written leaves the file as
// it was: the call gets the error (a full disk's matches syscall.ENOSPC),
// and the DB goes on serving, the next write too once the cause is gone.
// A full disk (ENOSPC, or EDQUOT) pauses the commits that follow: bbolt
// rebuilds its list of free pages after a failed commit by reading the
// whole file, so for ten times what the failed commit took (0.1 to 5 s)
// writes are refused without trying, their functions never run, with a
// *NoSpaceError that matches the commit's error; a commit is tried again
// once that time has passed, or at once when the disk has room again
// (Linux and macOS tell), and one that commits ends the pause.
// A commit whose meta page was written and whose sync then failed is
// different: bbolt returns the error and yet goes on from that commit,
// which the disk may not hold. Its call gets an error matching
// ErrCommitUnknown and ErrSyncFailed, and the DB refuses every call after
// it until it is closed and opened again (etcd, bbolt's best-known user,
// ends the process at any failed commit). Retried after the reopen, an
// idempotent call finds out whether it applied. DB.Err reports the state,
// for a liveness check, and DB.Done is closed when it begins (or at
// Close), as a context's Done and Err are: the background loops built on
// kv end on it at once, and a service can exit on it.
//
// A read can fail too: bbolt reads the file through a memory map, and a
// page the disk cannot read (or a file cut short beneath the process) is
// a memory fault, which ends a Go process. kv's transactions catch it
// instead: the call gets an error matching ErrReadFailed, and the DB
// refuses every call from then on, as after a failed sync. Code that
// recovers panics inside a transaction's function lets such a fault go
// on (DB.IsFault). A fault on other memory (a map of your own, in a
// transaction's function) is not the file's: on Linux kv tells them apart
// by the address, and that one goes on as the panic it is, the database
// serving on. A write transaction that faulted is rolled back without
// reading the file (bbolt's own rollback after a panic walks the whole
// file for its free pages, in a goroutine where the fault would end the
// process), and Close closes the file. Two cases stay bbolt's: a fault
// as bbolt begins a transaction leaves a lock of its own held, and Close
// then returns at once, the file left open until the process ends; and a
// commit whose write or sync fails is rolled back inside bbolt, by that
// walk, which a disk that fails reads as well can still end the process
// in.
//
// # What a reader sees
//
// A reader sees a commit only once it is on the disk. bbolt writes a
// commit's meta page into the file and then syncs it, and a bbolt reader
// that begins in between starts from that commit: it could hand out (as a
// replayed answer, a published event, a backup) what a power cut still
// takes back. DB.View and Backup wait instead, for as long as that sync
// takes, and read the commit once it returned; if it failed, they get the
// DB's refusal. A commit's handlers (Tx.OnCommit) run once it is on the
// disk, and may read it. (Raw reads of DB.Bolt's handle, and commits made
// on it outside kv, are not held back.)
//
// # Namespace, format and checks
//
// oncekv's own buckets live at the top level under the reserved prefix
// "\x00oncekv/". A DB's transactions refuse to create or open those names
// and leave them out of Tx.Cursor, so an application's buckets cannot
// collide with them. A format record there holds FormatVersion.
//
// Check runs bbolt's page-level check, verifies the format record and runs
// the Checkers it is given; each package exports its own (ledger.RecordKind,
// conditional.Checker, ...): nothing registers itself. A RecordKind is a
// Checker whose records expire; retention.Sweep takes the kinds to sweep.
//
// Options.Cipher, a key ring of package seal, encrypts what the packages
// built on kv store on the caller's behalf; they find it with DB.Cipher or,
// handed only a transaction, CipherOf (inspect.Rekey moves sealed values
// to the ring's current key).
//
// # Caveats
//
//   - bbolt allows one process at a time to open a file for writing. Reading
//     a database held by a running service needs that service's cooperation
//     (the admin handler of package inspect), not a second Open.
//   - Options.NoSync trades durability for speed; never use it in production.
//   - Code holding a raw *bbolt.Tx can reach the reserved buckets. It must not
//     modify them.
//   - The port has no nested buckets; code that needs them on bbolt uses
//     BoltTx.
//   - Options.Clock drives every time decision. With kvtest.ManualClock in
//     tests, nothing in oncekv sleeps on wall time except explicit waits the
//     caller asked for.
package kv

package kv

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/oncekv/oncekv/internal/record"
)

// MaxKeySize is the longest key Bucket.Put takes, in bytes, on every
// backend: bbolt's own limit, kept by the others too so that code written
// against one fails the same way on another.
const MaxKeySize = bolt.MaxKeySize

// Errors returned by writes, the same on every backend (they are bbolt's
// own errors, so errors.Is works with either name).
var (
	// ErrKeyRequired is returned by Bucket.Put for an empty key.
	ErrKeyRequired = berrors.ErrKeyRequired

	// ErrKeyTooLarge is returned by Bucket.Put for a key longer than
	// MaxKeySize.
	ErrKeyTooLarge = berrors.ErrKeyTooLarge

	// ErrBucketNameRequired is returned by Tx.CreateBucketIfNotExists for
	// an empty name.
	ErrBucketNameRequired = berrors.ErrBucketNameRequired

	// ErrTxNotWritable is returned by a write (Put, Delete, NextSequence,
	// CreateBucketIfNotExists) in a read-only transaction.
	ErrTxNotWritable = berrors.ErrTxNotWritable
)

// Errors returned by Open.
var (
	// ErrLocked is returned (in a *FileError) when another process holds the
	// database file's lock for longer than Options.LockTimeout, or when this
	// process has the file open already (share that *DB instead).
	ErrLocked = errors.New("kv: database is locked")

	// ErrNewerFormat is returned (in a *FileError) when the store was
	// written by a newer oncekv format than this build understands. The
	// store is not modified.
	ErrNewerFormat = errors.New("kv: database was written by a newer oncekv format")

	// ErrInvalidOptions is returned when Options fail validation.
	ErrInvalidOptions = errors.New("kv: invalid options")

	// ErrNotDatabase is returned (in a *FileError) when the path is not an
	// oncekv database: a directory, a file that is not bbolt, or — with
	// Options.RequireFormat — an empty file or another application's bbolt
	// file. The file is not modified.
	ErrNotDatabase = errors.New("kv: not an oncekv database")

	// ErrDamaged is returned (in a *FileError) when the file is a database
	// but damaged: truncated, a page number past its end, or a structure
	// bbolt's own assertions reject. Restore it from a backup.
	ErrDamaged = errors.New("kv: database file is damaged")
)

// FileError reports a store that cannot be opened as an oncekv database,
// and why. errors.Is with ErrLocked, ErrNewerFormat, ErrNotDatabase or
// ErrDamaged says which kind of problem it is.
type FileError struct {
	Path   string
	Err    error  // ErrLocked, ErrNewerFormat, ErrNotDatabase or ErrDamaged
	Reason string // what is wrong, for people
	Cause  error  // the underlying error, if any (bbolt's, a *CorruptError)
}

func (e *FileError) Error() string { return fmt.Sprintf("kv: %s %s", e.Path, e.Reason) }

// Unwrap returns the kind of problem (Err) and the cause.
func (e *FileError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// Errors returned by transactions.
var (
	// ErrReservedName is returned when a caller tries to create, open or delete
	// a top-level bucket in oncekv's reserved namespace through a Tx.
	ErrReservedName = errors.New("kv: bucket name is in oncekv's reserved namespace")

	// ErrClosed is returned by managed transactions on a closed DB.
	ErrClosed = errors.New("kv: database is closed")

	// ErrCommitUnknown is wrapped by the error of a backend that sent a
	// commit, lost its answer, and could not learn whether it applied
	// (etcdkv, when etcd stays out of reach). The transaction may or may
	// not have applied: read before doing it again. On bbolt, it is
	// returned for a commit whose sync failed after its meta page was
	// written (with ErrSyncFailed), and by Batch to the other calls of a
	// batch whose commit panicked outside their functions (an observer's
	// Commit, say), the panic itself raised in the call that led the
	// batch.
	ErrCommitUnknown = errors.New("kv: commit outcome unknown")

	// ErrSyncFailed is wrapped by the error of a bbolt commit whose last
	// sync failed after its meta page was written (an I/O error, or a
	// volume out of space that says so only at the sync), and by the error
	// of every call on the DB after it. The process sees that commit
	// (bbolt goes on from it) and the disk may not hold it: after a failed
	// sync the kernel may drop the pages it could not write. So the DB
	// refuses every call from then on, reads included, until it is closed
	// and opened again; the open reads what the file on the disk holds.
	// The failed commit's own error also wraps ErrCommitUnknown: run again
	// after the reopen, an idempotent call finds out whether it applied.
	// This is etcd's answer too (its backend ends the process on a failed
	// commit), without ending the process. Close writes nothing on such a
	// DB: bbolt's freelist is rebuilt at the next open.
	ErrSyncFailed = errors.New("kv: a commit's sync failed after its meta page was written")

	// ErrReadFailed is wrapped by the error of a bbolt transaction that
	// could not read a page of the file (a memory fault on bbolt's map of
	// it: the disk failed the read, or the file was cut short beneath the
	// process), and by the error of every call on the DB after it. Without
	// it the Go runtime ends the process ("unexpected fault address"). The
	// DB refuses every call from then on, as after ErrSyncFailed: a disk
	// that fails reads is a disk to replace, and the open after checks the
	// file (a *FileError if it cannot be read).
	ErrReadFailed = errors.New("kv: reading the database file failed")

	// ErrTxTooLarge is wrapped by the error of a backend that bounds a
	// transaction (etcd: 128 operations, 1.5 MiB a request) when a
	// transaction exceeds the bound. Nothing was written, and running it
	// again fails the same way: split the work, or store less (a stored
	// response of several megabytes, say). bbolt has no such bound.
	ErrTxTooLarge = errors.New("kv: transaction too large for the backend")

	// ErrNotDamaged is returned when an operator asks to drop a record
	// (DroppedEntry) that is intact and decodes: a readable record leaves
	// with the retention sweep, never by hand.
	ErrNotDamaged = errors.New("kv: the record is intact and decodes")

	// ErrNoEntry is returned when an operator asks to drop a record at a
	// log position that holds none.
	ErrNoEntry = errors.New("kv: no record at that log position")

	// ErrBackupUnsupported is returned by DB.Backup and DB.BackupFile on
	// a backend other than bbolt: an etcd cluster is backed up with
	// etcd's own snapshots (etcdctl snapshot save).
	ErrBackupUnsupported = errors.New("kv: backups are of bbolt files; back up an etcd cluster with etcd's snapshots (etcdctl snapshot save)")

	// ErrCorrupt is returned (wrapped in a *CorruptError) when a stored
	// record cannot be decoded.
	ErrCorrupt = record.ErrCorrupt
)

// CorruptError reports a stored record that failed to decode: a bad
// checksum, an unknown kind or version, or a field that runs past the end.
// errors.Is(err, ErrCorrupt) is true for it.
type CorruptError = record.CorruptError

package kv

import (
	"errors"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/internal/record"
)

// Errors returned by Open.
var (
	// ErrLocked is returned (wrapped in a *LockedError) when another process
	// holds the database file's lock for longer than Options.LockTimeout.
	ErrLocked = errors.New("kv: database is locked by another process")

	// ErrNewerFormat is returned (wrapped in a *FormatError) when the file was
	// written by a newer oncekv format than this build understands.
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

	// ErrAlreadyOpen is returned when this process already has the file open
	// through Open: share that *DB instead of opening the file again.
	ErrAlreadyOpen = errors.New("kv: database file is already open in this process")
)

// FileError reports a path that cannot be opened as an oncekv database,
// and why. errors.Is(err, ErrNotDatabase) or errors.Is(err, ErrDamaged) says
// which kind of problem it is.
type FileError struct {
	Path   string
	Err    error  // ErrNotDatabase or ErrDamaged
	Reason string // what is wrong, for people
	Cause  error  // the underlying error, if any (a *CorruptError)
}

func (e *FileError) Error() string { return fmt.Sprintf("kv: %s %s", e.Path, e.Reason) }

// Unwrap returns ErrNotDatabase or ErrDamaged, and the cause.
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

	// ErrCorrupt is returned (wrapped in a *CorruptError) when a stored
	// record cannot be decoded.
	ErrCorrupt = record.ErrCorrupt
)

// LockedError reports that the database file is held by another process.
// errors.Is(err, ErrLocked) is true for it.
type LockedError struct {
	Path     string        // database file
	Waited   time.Duration // how long Open waited for the lock
	Cause    error         // bbolt's error
	ReadOnly bool          // whether a shared (read-only) lock was requested
}

func (e *LockedError) Error() string {
	mode := "read-write"
	if e.ReadOnly {
		mode = "read-only"
	}
	return fmt.Sprintf("kv: open %s (%s): file lock held by another process after waiting %s; "+
		"bbolt allows one writing process per file: stop that process, or inspect it live through its admin endpoint",
		e.Path, mode, e.Waited)
}

// Unwrap returns ErrLocked and bbolt's cause.
func (e *LockedError) Unwrap() []error { return []error{ErrLocked, e.Cause} }

// FormatError reports a format version this build cannot read.
type FormatError struct {
	Path      string
	Found     uint32 // format version stored in the file
	Supported uint32 // newest version this build reads
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("kv: %s has oncekv format version %d, this build reads up to %d; upgrade oncekv to open it (the file was not modified)",
		e.Path, e.Found, e.Supported)
}

// Unwrap returns ErrNewerFormat.
func (e *FormatError) Unwrap() error { return ErrNewerFormat }

// CorruptError reports a stored record that failed to decode: a bad
// checksum, an unknown kind or version, or a field that runs past the end.
// errors.Is(err, ErrCorrupt) is true for it.
type CorruptError = record.CorruptError

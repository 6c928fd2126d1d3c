package conditional

import (
	"errors"
	"fmt"
)

// Errors returned when defining tables.
var (
	// ErrInvalidTable is returned by NewTable for a bad name or index list.
	ErrInvalidTable = errors.New("conditional: invalid table definition")
)

// Errors returned by row operations.
var (
	// ErrNotFound is returned when no row has the requested ID or index key.
	ErrNotFound = errors.New("conditional: row not found")

	// ErrInvalidID is returned for an empty ID or one longer than MaxIDLen.
	ErrInvalidID = errors.New("conditional: invalid row ID")

	// ErrInvalidIndexKey is returned when an index's Key function gives a
	// value a key that cannot be stored: empty, or longer than
	// MaxIndexKeyLen. Nothing is written.
	ErrInvalidIndexKey = errors.New("conditional: invalid index key")

	// ErrUnknownIndex is returned when an operation names an index the table
	// does not declare.
	ErrUnknownIndex = errors.New("conditional: unknown index")

	// ErrNotIndexed is returned by Upsert when the value has no key in the
	// index it upserts on (its Key function returned ok=false).
	ErrNotIndexed = errors.New("conditional: value has no key in the index")

	// ErrExists is returned (as an *ExistsError) by Insert when the ID is taken.
	ErrExists = errors.New("conditional: row ID already exists")

	// ErrUniqueViolation is returned (as a *UniqueViolationError) when a write
	// would give two rows the same key in a unique index.
	ErrUniqueViolation = errors.New("conditional: unique index violation")

	// ErrConflict is returned by Modify when every attempt lost a race.
	ErrConflict = errors.New("conditional: too many concurrent modifications")
)

// ExistsError reports an Insert whose ID is already in use.
type ExistsError struct {
	Table   string
	ID      string
	Version uint64 // the existing row's version
}

func (e *ExistsError) Error() string {
	return fmt.Sprintf("conditional: %s: row %q already exists (version %d)", e.Table, e.ID, e.Version)
}

// Unwrap returns ErrExists.
func (e *ExistsError) Unwrap() error { return ErrExists }

// UniqueViolationError names the index and the row that already holds the key.
type UniqueViolationError struct {
	Table      string
	Index      string
	Key        []byte
	ExistingID string // primary key of the row that holds Key
}

func (e *UniqueViolationError) Error() string {
	return fmt.Sprintf("conditional: %s: unique index %q already maps key %q to row %q", e.Table, e.Index, e.Key, e.ExistingID)
}

// Unwrap returns ErrUniqueViolation.
func (e *UniqueViolationError) Unwrap() error { return ErrUniqueViolation }

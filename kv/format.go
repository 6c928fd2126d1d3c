package kv

import (
	"context"
	"fmt"

	"github.com/oncekv/oncekv/internal/record"
)

// FormatVersion is the on-disk format this build writes. A store whose format
// record carries a larger number is refused with a *FormatError and left
// untouched; a store with a smaller number is read as is (every format
// change so far is additive). A store without a format record is stamped
// with FormatVersion the first time it is opened for writing.
//
// History:
//
//	1: initial format (December 2026).
//	2: idempotency records and inbox marks in an expiry-ordered log with an
//	   in-memory directory (bbolt); format-1 records are moved when a file
//	   is first opened for writing, and format 2 is stamped before the
//	   first one moves, so an older oncekv refuses the file instead of
//	   missing them.
//	3: the log's newest entries in a one-page tail bucket beside it (bbolt),
//	   moved to the log a page at a time; stamped when a format-2 file is
//	   first opened for writing, before any entry goes to the tail.
const FormatVersion uint32 = 3

var metaBucket = []byte(record.MetaBucket)

// storedFormat returns the format version recorded in the store (0 if
// none), or the error that makes the format record unreadable.
func storedFormat(tx Tx) (uint32, error) {
	raw := tx
	for {
		u, ok := raw.(interface{ Unwrap() Tx })
		if !ok {
			break
		}
		raw = u.Unwrap()
	}
	b := raw.Bucket(metaBucket)
	if b == nil {
		return 0, nil
	}
	v := b.Get(record.FormatKey)
	if v == nil {
		return 0, nil
	}
	return record.DecodeFormat(v)
}

// checkFormat refuses newer formats and stamps unformatted stores when
// writable, unless the format is required (then an unformatted store is
// another application's and is refused untouched).
func (db *DB) checkFormat() error {
	ctx := context.Background()
	var found uint32
	var damage error
	err := db.backend.View(ctx, func(tx Tx) error {
		found, damage = storedFormat(tx)
		return nil
	})
	if err != nil {
		// The backend could not read (etcd unreachable, a prefix
		// refused): nothing says the store is damaged.
		return fmt.Errorf("kv: %s: read the format record: %w", db.path, err)
	}
	if damage != nil {
		return &FileError{Path: db.path, Err: ErrDamaged, Reason: fmt.Sprintf("has an unreadable oncekv format record: %v", damage), Cause: damage}
	}
	if found > FormatVersion {
		return &FileError{Path: db.path, Err: ErrNewerFormat, Reason: fmt.Sprintf(
			"has oncekv format version %d, this build reads up to %d; upgrade oncekv to open it (the file was not modified)", found, FormatVersion)}
	}
	if found == 0 && db.opts.RequireFormat {
		what := "store"
		if db.bolt != nil {
			what = "bbolt file"
		}
		return &FileError{Path: db.path, Err: ErrNotDatabase, Reason: "is a " + what + " without an oncekv format record (another application's database?); it was not modified"}
	}
	if found != 0 || db.opts.ReadOnly {
		return nil
	}
	return db.backend.Update(ctx, func(tx Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		return b.Put(record.FormatKey, record.EncodeFormat(FormatVersion))
	})
}

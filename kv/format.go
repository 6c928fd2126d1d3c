package kv

import (
	"context"
	"fmt"
	"time"

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
const FormatVersion uint32 = 1

// Never is the expiry of a record whose retention is unlimited: far in the
// future but inside the range of the time encoding (int64 Unix
// nanoseconds). Every expiry later than Never is stored as Never, so a
// record is either kept for a bounded time or forever, never wrapped round
// into the past.
var Never = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxRetention is the longest retention, lease or delay a configuration may
// name (100 years). Times are stored as int64 Unix nanoseconds, which end in
// 2262: a longer duration added to now would wrap round into the past and
// make a record expired at once (issue 13). Configurations reject anything
// longer; use a negative retention (retention.Forever) to keep records for
// good.
const MaxRetention = 100 * 365 * 24 * time.Hour

var metaBucket = []byte(record.MetaBucket)

// StoredFormat returns the format version recorded in the store (0 if
// none), or the error that makes the format record unreadable.
func StoredFormat(tx Tx) (uint32, error) {
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
	err := db.backend.View(ctx, func(tx Tx) error {
		var err error
		found, err = StoredFormat(tx)
		return err
	})
	if err != nil {
		return &FileError{Path: db.path, Err: ErrDamaged, Reason: fmt.Sprintf("has an unreadable oncekv format record: %v", err), Cause: err}
	}
	if found > FormatVersion {
		return &FormatError{Path: db.path, Found: found, Supported: FormatVersion}
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

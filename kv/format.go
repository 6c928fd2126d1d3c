package kv

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// FormatVersion is the on-disk format this build writes. A file whose format
// record carries a larger number is refused by Open with a *FormatError and
// left untouched; a file with a smaller number is read as is (every format
// change so far is additive). A file without a format record is stamped with
// FormatVersion the first time it is opened for writing.
//
// History:
//
//	1: initial format (December 2026).
const FormatVersion uint32 = 1

var (
	metaNS    = NewNamespace("meta")
	formatKey = []byte("format")
)

var errReadOnlyTx = errors.New("kv: write in a read-only transaction")

// readFormat returns the stored format version, 0 if none is stored.
func readFormat(tx *bolt.Tx) (uint32, error) {
	b := tx.Bucket(metaNS.Bytes())
	if b == nil {
		return 0, nil
	}
	v := b.Get(formatKey)
	if v == nil {
		return 0, nil
	}
	d, _, err := NewDecoder(KindFormat, v)
	if err != nil {
		return 0, err
	}
	n := d.Uvarint()
	if err := d.Done(); err != nil {
		return 0, err
	}
	if n == 0 || n > 1<<31 {
		return 0, d.Fail(fmt.Sprintf("format version %d out of range", n))
	}
	return uint32(n), nil
}

// checkFormat refuses newer formats and stamps unformatted files when
// writable, unless the format is required (then an unformatted file is
// another application's and is refused untouched).
func checkFormat(db *bolt.DB, path string, required bool) error {
	var found uint32
	err := db.View(func(tx *bolt.Tx) error {
		var err error
		found, err = readFormat(tx)
		return err
	})
	if err != nil {
		return &FileError{Path: path, Err: ErrDamaged, Reason: fmt.Sprintf("has an unreadable oncekv format record: %v", err), Cause: err}
	}
	if found > FormatVersion {
		return &FormatError{Path: path, Found: found, Supported: FormatVersion}
	}
	if found == 0 && required {
		return &FileError{Path: path, Err: ErrNotDatabase, Reason: "is a bbolt file without an oncekv format record (another application's database?); it was not modified"}
	}
	if found != 0 || db.IsReadOnly() {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaNS.Bytes())
		if err != nil {
			return err
		}
		return b.Put(formatKey, encodeFormat(FormatVersion))
	})
}

func encodeFormat(v uint32) []byte {
	var e Encoder
	e.Reset(KindFormat, 1)
	e.Uvarint(uint64(v))
	return e.Finish()
}

// WriteFormatForTest stamps the file's format record with v. It exists so that
// tests (here and in the CLI) can produce a file from a "newer" oncekv.
func WriteFormatForTest(db *bolt.DB, v uint32) error {
	return db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(metaNS.Bytes())
		if err != nil {
			return err
		}
		return b.Put(formatKey, encodeFormat(v))
	})
}

// StoredFormat returns the format version recorded in the file (0 if none).
func StoredFormat(tx Tx) (uint32, error) {
	bt := BoltTx(tx)
	if bt == nil {
		return 0, errors.New("kv: format record needs a bbolt transaction")
	}
	return readFormat(bt)
}

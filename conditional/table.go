package conditional

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/txn"
	"github.com/oncekv/oncekv/kv"
)

// MaxIDLen is the longest row ID accepted, in bytes.
const MaxIDLen = 1024

// MaxIndexKeyLen is the longest key an index may give a value, in bytes:
// the kv port's limit on a key (kv.MaxKeySize, bbolt's own). An index key
// is never empty; an optional field that is empty leaves the row out of
// the index (Index.Key returns ok=false).
const MaxIndexKeyLen = kv.MaxKeySize

// Index declares a unique index over a table's values.
type Index[T any] struct {
	// Name identifies the index; it is part of the bucket name, so keep it
	// stable. Letters, digits, '_', '-' and '.' are allowed.
	Name string
	// Key returns the value's key in the index, usually built with Key (for
	// example Key(o.Tenant, o.ExternalRef)). ok=false leaves the row out of
	// the index (an optional field that is empty).
	Key func(v T) (key []byte, ok bool)
}

// Options configure a Table. A nil *Options means JSON and no indexes.
type Options[T any] struct {
	// Codec encodes values. nil means JSON[T].
	Codec Codec[T]
	// Indexes are the table's unique indexes.
	Indexes []Index[T]
	// Seal stores the rows' values encrypted with the database's key ring
	// (kv.Options.Cipher, which it requires): the IDs, versions and index
	// keys stay clear. Rows stored before stay clear until rewritten;
	// sealed rows open whatever this option says.
	Seal bool
}

// Table is a typed collection of versioned rows with unique indexes, stored
// in oncekv's namespace of a kv.DB. It is safe for concurrent use.
type Table[T any] struct {
	db      *kv.DB
	name    string
	codec   Codec[T]
	rows    keyspace.Namespace
	indexes []Index[T]
	idxNS   []keyspace.Namespace
	seal    bool
}

const tablePrefix = "table/"

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		ok := c == '_' || c == '-' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

func rowsNamespace(table string) keyspace.Namespace { return keyspace.New(tablePrefix + table) }

func indexNamespace(table, index string) keyspace.Namespace {
	return keyspace.New(tablePrefix + table + "/idx/" + index)
}

// NewTable defines a table named name over db. Defining it does not write
// anything; its buckets are created by the first write.
func NewTable[T any](db *kv.DB, name string, opts *Options[T]) (*Table[T], error) {
	if !validName(name) {
		return nil, fmt.Errorf("%w: table name %q (use letters, digits, '_', '-', '.')", ErrInvalidTable, name)
	}
	t := &Table[T]{db: db, name: name, codec: JSON[T]{}, rows: rowsNamespace(name)}
	if opts != nil {
		if opts.Codec != nil {
			t.codec = opts.Codec
		}
		if opts.Seal && db.Cipher() == nil {
			return nil, fmt.Errorf("%w: %s: Seal needs a key ring (kv.Options.Cipher)", ErrInvalidTable, name)
		}
		t.seal = opts.Seal
		seen := map[string]bool{}
		for _, ix := range opts.Indexes {
			switch {
			case !validName(ix.Name):
				return nil, fmt.Errorf("%w: index name %q", ErrInvalidTable, ix.Name)
			case seen[ix.Name]:
				return nil, fmt.Errorf("%w: index %q declared twice", ErrInvalidTable, ix.Name)
			case ix.Key == nil:
				return nil, fmt.Errorf("%w: index %q has no Key function", ErrInvalidTable, ix.Name)
			}
			seen[ix.Name] = true
			t.indexes = append(t.indexes, ix)
			t.idxNS = append(t.idxNS, indexNamespace(name, ix.Name))
		}
	}
	return t, nil
}

// Name returns the table's name.
func (t *Table[T]) Name() string { return t.name }

// DB returns the database the table lives in.
func (t *Table[T]) DB() *kv.DB { return t.db }

func validID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrInvalidID, len(id), MaxIDLen)
	}
	return nil
}

func (t *Table[T]) indexPos(name string) (int, error) {
	for i, ix := range t.indexes {
		if ix.Name == name {
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: %s has no index %q", ErrUnknownIndex, t.name, name)
}

// load returns the stored row for id, or ok=false.
func (t *Table[T]) load(tx kv.Tx, id string) (storedRow, bool, error) {
	b := t.rows.Bucket(tx)
	if b == nil {
		return storedRow{}, false, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return storedRow{}, false, nil
	}
	r, err := decodeRow(v)
	if err == nil && r.sealed {
		err = r.open(kv.CipherOf(tx), t.name, id)
	}
	if err != nil {
		return storedRow{}, false, fmt.Errorf("conditional: %s: row %q: %w", t.name, id, err)
	}
	return r, true, nil
}

func (t *Table[T]) decode(id string, r storedRow) (Row[T], error) {
	v, err := t.codec.Decode(r.value)
	if err != nil {
		return Row[T]{}, fmt.Errorf("conditional: %s: decode row %q: %w", t.name, id, err)
	}
	return Row[T]{ID: id, Version: r.version, Value: v}, nil
}

// keysOf computes v's key in every index.
func (t *Table[T]) keysOf(v T) []indexKey {
	var keys []indexKey
	for _, ix := range t.indexes {
		if k, ok := ix.Key(v); ok {
			keys = append(keys, indexKey{index: ix.Name, key: bytes.Clone(k)})
		}
	}
	return keys
}

// prepared is a row ready to be written: encoded and checked against every
// unique index, before anything is written.
type prepared struct {
	value []byte
	keys  []indexKey
}

// prepare encodes v for row id and checks its index keys. A unique
// violation is returned before anything is written, so callers can reject.
func (t *Table[T]) prepare(tx kv.Tx, id string, v T) (prepared, error) {
	val, err := t.codec.Encode(v)
	if err != nil {
		return prepared{}, fmt.Errorf("conditional: %s: encode row %q: %w", t.name, id, err)
	}
	p := prepared{value: val, keys: t.keysOf(v)}
	for _, k := range p.keys {
		if len(k.key) == 0 || len(k.key) > MaxIndexKeyLen {
			return prepared{}, fmt.Errorf("%w: %s: index %q gives row %q a key of %d bytes (want 1 to %d)",
				ErrInvalidIndexKey, t.name, k.index, id, len(k.key), MaxIndexKeyLen)
		}
	}
	for _, k := range p.keys {
		i, _ := t.indexPos(k.index)
		ib := t.idxNS[i].Bucket(tx)
		if ib == nil {
			continue
		}
		if owner := ib.Get(k.key); owner != nil && string(owner) != id {
			return prepared{}, &UniqueViolationError{Table: t.name, Index: k.index, Key: k.key, ExistingID: string(owner)}
		}
	}
	return p, nil
}

// write stores row id at version with p's value, moving index entries from
// old's keys (nil for a new row) to p's keys.
func (t *Table[T]) write(tx kv.Tx, id string, version uint64, p prepared, old *storedRow) error {
	rb, err := t.rows.Create(tx)
	if err != nil {
		return err
	}
	// A fresh buffer per row: bbolt keeps the value slice until commit.
	row := storedRow{version: version, keys: p.keys, value: p.value}
	if t.seal {
		ring := kv.CipherOf(tx)
		if ring == nil {
			return fmt.Errorf("%w: %s: Seal needs a key ring (kv.Options.Cipher)", ErrInvalidTable, t.name)
		}
		row.value, row.sealed = ring.Seal(nil, p.value, rowAAD(t.name, id)), true
	}
	var e record.Encoder
	if err := rb.Put([]byte(id), encodeRow(&e, row)); err != nil {
		return err
	}
	for i, ix := range t.indexes {
		var oldKey, newKey []byte
		var hadOld, hasNew bool
		if old != nil {
			oldKey, hadOld = old.keyFor(ix.Name)
		}
		for _, k := range p.keys {
			if k.index == ix.Name {
				newKey, hasNew = k.key, true
			}
		}
		if hadOld == hasNew && bytes.Equal(oldKey, newKey) {
			continue
		}
		ib, err := t.idxNS[i].Create(tx)
		if err != nil {
			return err
		}
		if hadOld {
			if err := ib.Delete(oldKey); err != nil {
				return err
			}
		}
		if hasNew {
			if err := ib.Put(newKey, []byte(id)); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove deletes row id and its index entries.
func (t *Table[T]) remove(tx kv.Tx, id string, old storedRow) error {
	rb, err := t.rows.Create(tx)
	if err != nil {
		return err
	}
	if err := rb.Delete([]byte(id)); err != nil {
		return err
	}
	for _, k := range old.keys {
		i, err := t.indexPos(k.index)
		if err != nil {
			continue // an index no longer declared: its bucket is left alone
		}
		if ib := t.idxNS[i].Bucket(tx); ib != nil {
			if err := ib.Delete(k.key); err != nil {
				return err
			}
		}
	}
	return nil
}

// batch runs fn under group commit; outcomes that write nothing (a unique
// violation, an existing ID, a missing row, an index key that cannot be
// stored) are passed through kv.Reject so they do not fail the other calls
// of the batch.
func (t *Table[T]) batch(ctx context.Context, fn func(tx kv.Tx) error) error {
	return t.db.Batch(ctx, func(tx kv.Tx) error {
		err := fn(tx)
		if errors.Is(err, ErrUniqueViolation) || errors.Is(err, ErrExists) || errors.Is(err, ErrNotFound) ||
			errors.Is(err, ErrInvalidIndexKey) {
			return kv.Reject(err)
		}
		return err
	})
}

// managed runs fn, a Tx form, in its own group-committed transaction.
func managed[T, R any](ctx context.Context, t *Table[T], fn func(tx kv.Tx) (R, error)) (R, error) {
	res, err := txn.Run(ctx, t.batch, func(tx kv.Tx) (R, error) { return fn(tx) })
	return res, err
}

func (t *Table[T]) String() string { return "conditional.Table(" + t.name + ")" }

// tableOf extracts the table name from a rows namespace name; "" if the
// bucket is not a table's rows bucket.
func tableOf(ns []byte) string {
	name, ok := strings.CutPrefix(string(ns), record.ReservedPrefix+tablePrefix)
	if !ok || strings.Contains(name, "/") {
		return ""
	}
	return name
}

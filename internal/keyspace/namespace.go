package keyspace

import (
	"bytes"
	"fmt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
)

var reservedPrefix = []byte(record.ReservedPrefix)

// ErrReadOnlyTx is returned when a namespace is created in a read-only
// transaction. It is kv.ErrTxNotWritable, as a write through the port's
// own calls would return.
var ErrReadOnlyTx = fmt.Errorf("kv: write in a read-only transaction: %w", kv.ErrTxNotWritable)

// Raw returns the backend transaction behind tx, past the reserved-name
// guard of kv.DB and any wrapper (anything with an Unwrap() kv.Tx method).
func Raw(tx kv.Tx) kv.Tx {
	for {
		u, ok := tx.(interface{ Unwrap() kv.Tx })
		if !ok {
			return tx
		}
		tx = u.Unwrap()
	}
}

// Prefetcher returns tx's prefetch (kv.BucketKey): it reads keys into tx
// in one request, so that tx's Gets of them send none. It is nil where
// the backend has none (bbolt, whose reads are memory), so that a caller
// on bbolt's hot path builds no keys.
func Prefetcher(tx kv.Tx) func([]kv.BucketKey) {
	if p, ok := Raw(tx).(interface{ Prefetch([]kv.BucketKey) }); ok {
		return p.Prefetch
	}
	return nil
}

// Namespace is the name of one of oncekv's own top-level buckets, such as
// "ledger" or "outbox".
type Namespace struct {
	full []byte
}

// New returns the reserved bucket for name, which must be non-empty.
func New(name string) Namespace {
	if name == "" {
		panic("keyspace: empty namespace name")
	}
	return Namespace{full: []byte(record.ReservedPrefix + name)}
}

// Name returns the short name (without the reserved prefix).
func (n Namespace) Name() string { return string(n.full[len(reservedPrefix):]) }

// Bytes returns the full top-level bucket name.
func (n Namespace) Bytes() []byte { return n.full }

// Bucket returns the namespace's bucket in tx, or nil if it does not exist
// yet (nothing has been written to it).
func (n Namespace) Bucket(tx kv.Tx) kv.Bucket { return Raw(tx).Bucket(n.full) }

// Create returns the namespace's bucket in the writable tx, creating it if
// needed. It looks the bucket up first: bbolt's CreateBucketIfNotExists
// copies the name on every call, and the hot path opens its buckets once
// per request.
func (n Namespace) Create(tx kv.Tx) (kv.Bucket, error) {
	if !tx.Writable() {
		return nil, ErrReadOnlyTx
	}
	raw := Raw(tx)
	if b := raw.Bucket(n.full); b != nil {
		return b, nil
	}
	return raw.CreateBucketIfNotExists(n.full)
}

// List returns the reserved buckets that exist in tx and whose short name
// starts with prefix, in byte order. The CLI and the consistency checks use
// it to find every table and index.
func List(tx kv.Tx, prefix string) []Namespace {
	var out []Namespace
	start := append(append([]byte(nil), reservedPrefix...), prefix...)
	c := Raw(tx).Cursor()
	for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, start); k, _ = c.Next() {
		out = append(out, Namespace{full: bytes.Clone(k)})
	}
	return out
}

// StoredFormat returns the format version recorded in the store (0 if
// none), or the error that makes the format record unreadable.
func StoredFormat(tx kv.Tx) (uint32, error) {
	b := Raw(tx).Bucket([]byte(record.MetaBucket))
	if b == nil {
		return 0, nil
	}
	v := b.Get(record.FormatKey)
	if v == nil {
		return 0, nil
	}
	return record.DecodeFormat(v)
}

// StampFormat records format version v in the writable tx.
func StampFormat(tx kv.Tx, v uint32) error {
	if !tx.Writable() {
		return ErrReadOnlyTx
	}
	b, err := Raw(tx).CreateBucketIfNotExists([]byte(record.MetaBucket))
	if err != nil {
		return err
	}
	return b.Put(record.FormatKey, record.EncodeFormat(v))
}

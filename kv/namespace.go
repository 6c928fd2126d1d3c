package kv

import "bytes"

// ReservedPrefix starts the name of every top-level bucket oncekv owns. Top-level
// names with this prefix are refused by Tx.CreateBucketIfNotExists, hidden
// from Tx.Bucket and protected from Tx.DeleteBucket, so a caller's buckets
// can never collide with oncekv's.
//
// Code that uses a raw *bbolt.Tx can still reach these buckets; it must leave
// them alone.
const ReservedPrefix = "\x00oncekv/"

var reservedPrefix = []byte(ReservedPrefix)

// IsReserved reports whether a top-level bucket name is in oncekv's reserved
// namespace.
func IsReserved(name []byte) bool { return bytes.HasPrefix(name, reservedPrefix) }

// Namespace is the name of one of oncekv's own top-level buckets, such as
// "ledger" or "outbox". It is used by oncekv's packages, not by applications.
type Namespace struct {
	full []byte
}

// NewNamespace returns the reserved bucket for name. name must be non-empty
// and is used as-is after ReservedPrefix.
func NewNamespace(name string) Namespace {
	if name == "" {
		panic("kv: empty namespace name")
	}
	return Namespace{full: []byte(ReservedPrefix + name)}
}

// Name returns the short name (without ReservedPrefix).
func (n Namespace) Name() string { return string(n.full[len(reservedPrefix):]) }

// Bytes returns the full top-level bucket name.
func (n Namespace) Bytes() []byte { return n.full }

// Bucket returns the namespace's bucket in tx, or nil if it does not exist
// yet (nothing has been written to it).
func (n Namespace) Bucket(tx Tx) Bucket {
	b, _ := tx.reserved(n.full, false)
	return b
}

// Create returns the namespace's bucket in the writable tx, creating it if
// needed.
func (n Namespace) Create(tx Tx) (Bucket, error) {
	if !tx.Writable() {
		return nil, errReadOnlyTx
	}
	return tx.reserved(n.full, true)
}

// Namespaces returns the short names of the reserved buckets that exist in
// tx and start with prefix, in byte order. The CLI and the consistency
// checks use it to find every table and index.
func Namespaces(tx Tx, prefix string) []Namespace {
	var out []Namespace
	for _, n := range tx.reservedNames() {
		if len(n) >= len(prefix) && n[:len(prefix)] == prefix {
			out = append(out, NewNamespace(n))
		}
	}
	return out
}

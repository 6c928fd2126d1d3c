package recstore

import (
	"bytes"
	"context"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// Spec describes one kind of record.
type Spec struct {
	// Name names the buckets: the log Name+".log" and its tail
	// Name+".tail", the keyed layout Name and Name+".expiry".
	Name string
	// Group, if set, names the group an entry's scope counts in (nil: in
	// none), and the log layout keeps a Tally of the groups' records in
	// memory; the file holds only the stamp that orders it, the sequence
	// of the tail bucket.
	Group func(scope []byte) []byte
}

// logNS and tailNS are the namespaces of spec's log and its tail.
func (spec Spec) logNS() keyspace.Namespace  { return keyspace.New(spec.Name + ".log") }
func (spec Spec) tailNS() keyspace.Namespace { return keyspace.New(spec.Name + ".tail") }

// oldTallyNS is the bucket where earlier builds kept the stamp of spec's
// tally (tally.go), which the first writable open removes.
func (spec Spec) oldTallyNS() keyspace.Namespace { return keyspace.New(spec.Name + ".tally") }

// Ref locates a record found by Get, for the Put or Delete that replaces it
// in the same transaction.
type Ref struct {
	pos uint64 // log position
	key []byte // keyed layout: the bucket key
}

// Pos returns r's log position (what DropDamaged takes), or 0 in the
// keyed layout.
func (r Ref) Pos() uint64 { return r.pos }

// IsZero reports whether r locates nothing (no record was found).
func (r Ref) IsZero() bool { return r.pos == 0 && r.key == nil }

// Cursor returns r as bytes (the record's log position or bucket key).
func (r Ref) Cursor() []byte {
	if r.key != nil {
		return r.key
	}
	return posKey(r.pos)
}

// Store finds, writes and removes one kind of record.
type Store interface {
	// Layout is "log" or "keyed".
	Layout() string
	// Get returns the record of (scope, key) visible in tx: where it is and
	// its value (valid until tx ends), or a zero Ref and nil. Values are the
	// kind's own encoding; the store frames them as it needs.
	Get(tx kv.Tx, scope, key string) (Ref, []byte, error)
	// Put stores value as the record of (scope, key), expiring at expiry,
	// in place of prev (from Get; zero for a new record, prevExpiry its
	// expiry). value must not change until tx ends. ctx may carry a Journal.
	Put(ctx context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, value []byte) (Ref, error)
	// Frame returns buf[:0] (grown to hold room bytes more) with the head
	// of what the store keeps for (scope, key)'s record: the log entry's
	// header, scope and key (log layout), nothing (keyed). The caller
	// appends the value, and room for a 4-byte trailer, and stores it all
	// with PutFramed: one buffer, which the caller may allocate before
	// the transaction.
	Frame(buf []byte, scope, key string, room int) []byte
	// PutFramed is Put of a value encoded after the head Frame returned
	// for (scope, key). The store may close the frame in framed's spare
	// capacity; framed must not change until tx ends.
	PutFramed(ctx context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, framed []byte) (Ref, error)
	// Delete removes the record at ref (found by Get or Scan).
	Delete(tx kv.Tx, scope, key string, ref Ref, expiry time.Time) error
	// Scan calls fn for every record whose scope starts with prefix (keyed:
	// in scope order; log: in expiry order), until fn returns false. ok is
	// false for an entry whose scope and key cannot be read (then v is the
	// raw entry).
	Scan(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool)
	// List is Scan for showing records to someone: ok is also false for
	// an entry whose checksum fails (log layout), whose scope and key may
	// be damaged bytes that name another record. Scope and key are then
	// as far as they read ("" if not at all), for the listing to say
	// which entry is damaged. Scan does not check checksums: what counts
	// records (usage, the check's totals) counts an entry by what it says.
	List(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool)
	// Stats describes the store in this process.
	Stats() Stats
	// Tally returns the store's counts by group (log layout, Spec.Group
	// set), or nil: the keyed layout counts nothing.
	Tally() *Tally
	// Probe reports whether (scope, key) may have a record. False is
	// final; true means look (the keyed layout always says true), with
	// GetProbed and the Probe returned, so that the look-up does not go
	// through the directory a second time.
	Probe(scope, key string) (Probe, bool)
	// GetProbed is Get starting from p, from a Probe made before tx began
	// or in it: a record found where p points is verified like any other,
	// and when it is not there the look-up starts afresh.
	GetProbed(tx kv.Tx, scope, key string, p Probe) (Ref, []byte, error)
	// Cached returns, without a transaction, the value of the record of
	// (scope, key) at p when this process committed it recently and no
	// change to it has begun since (log layout; recent.go). ok false means
	// look in a transaction (also when ctx is done or the database is
	// closed: the transaction reports it). The value must not be modified.
	Cached(ctx context.Context, p Probe, scope, key string) (ref Ref, v []byte, ok bool)
}

// Probe is what Store.Probe found: the first position the directory
// holds for a key (log layout), or nothing.
type Probe struct {
	pos   uint64
	h     uint64 // the key's hash (log layout)
	extra bool   // the directory holds more positions under h
	// made is set for a probe of the log layout; adds is its slot's add
	// count then, with which a miss need not look again (log.go).
	made bool
	adds uint32
}

// Stats describes a store.
type Stats struct {
	Layout string // "log" or "keyed"
	// Directory (log only): positions held, of them extra ones (a hash with
	// more than one position), the records counted when the directory was
	// rebuilt, how long that took, and unreadable values met.
	Positions, Extra int
	Rebuilt          int
	RebuildTime      time.Duration
	Unreadable       int
	// Cache of recent entries (log only): entries held and their bytes;
	// look-ups it answered, and look-ups of a key the directory holds that
	// it could not answer (they read the log).
	Cached, CachedBytes    int
	CacheHits, CacheMisses uint64
	// Groups is how many groups the tally counts records of (log layout
	// with Spec.Group).
	Groups int
}

// splitKey splits a keyed-layout bucket key scope NUL key.
func splitKey(k []byte) (scope, key []byte, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return nil, nil, false
	}
	return k[:i], k[i+1:], true
}

// JoinKey is the keyed-layout bucket key of (scope, key).
func JoinKey(scope, key string) []byte {
	k := make([]byte, 0, len(scope)+1+len(key))
	k = append(k, scope...)
	k = append(k, 0)
	return append(k, key...)
}

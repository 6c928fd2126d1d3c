package keyspace

import (
	"fmt"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// Kind is the one record-kind abstraction: records of type R stored under
// keys in a reserved namespace, each with an entry in an expiry index at
// the time it stops counting. It implements kv.RecordKind with one generic
// sweeper (Due, Expire) and one generic record↔index checker (Check), so a
// package describes its records instead of re-writing both.
type Kind[R any] struct {
	// KindName is the stable name ("idempotency", "inbox", ...), the one
	// retention policies use.
	KindName string
	// Records holds the records, keyed as the expiry index's entries name
	// them.
	Records Namespace
	// Expiry indexes the records by expiry time.
	Expiry TimeIndex
	// Decode decodes the record stored at key; full asks for every field
	// (the check), otherwise what expiry needs is enough (the sweep).
	Decode func(key, value []byte, full bool) (R, error)
	// ExpiresAt returns when r stops counting; the zero time for a record
	// that has no expiry yet (a pending intent), which must then have no
	// index entry.
	ExpiresAt func(r R) time.Time
	// Keep returns why an expired r must stay ("live lease"), or "" when it
	// may go. nil lets every expired record go.
	Keep func(r R, now time.Time) string
	// Absent returns why an index entry without a record is expected (the
	// record moved to a state without expiry), or "" for a mismatch. nil
	// means every such entry is a mismatch.
	Absent func(tx kv.Tx, key []byte) string
	// Remove deletes r (at key in b) and everything kept with it: its index
	// entry, counters, secondary indexes.
	Remove func(tx kv.Tx, b kv.Bucket, key []byte, r R) error
	// CheckRecord, if set, reports problems of one decoded record.
	CheckRecord func(tx kv.Tx, key []byte, r R, report func(string))
	// CheckMore, if set, runs the kind's other invariants.
	CheckMore func(tx kv.Tx, report func(string))
}

var _ kv.RecordKind = (*Kind[struct{}])(nil)

// Name returns KindName.
func (k *Kind[R]) Name() string { return k.KindName }

// Due returns up to limit index entries due at now, after the cursor after.
func (k *Kind[R]) Due(tx kv.Tx, now time.Time, after []byte, limit int) []kv.Due {
	return k.Expiry.Due(tx, now, after, limit)
}

// Expire re-checks the record behind d and, unless dryRun, removes it when
// it is past its expiry and Keep lets it go. Corrupt records are never
// deleted blindly: the consistency check reports them.
func (k *Kind[R]) Expire(tx kv.Tx, d kv.Due, now time.Time, dryRun bool) (bool, string, error) {
	b := k.Records.Bucket(tx)
	var v []byte
	if b != nil {
		v = b.Get(d.Key)
	}
	if v == nil {
		if k.Absent != nil {
			if why := k.Absent(tx, d.Key); why != "" {
				return false, why, nil
			}
		}
		return false, "index mismatch", nil
	}
	r, err := k.Decode(d.Key, v, false)
	if err != nil {
		return false, "corrupt", nil
	}
	exp := k.ExpiresAt(r)
	switch {
	case !exp.Equal(d.At):
		return false, "index mismatch", nil
	case now.Before(exp):
		return false, "not expired", nil
	}
	if k.Keep != nil {
		if why := k.Keep(r, now); why != "" {
			return false, why, nil
		}
	}
	if dryRun {
		return true, "", nil
	}
	return true, "", k.Remove(tx, b, d.Key, r)
}

// Check verifies that every record decodes, that every record with an
// expiry has exactly the index entry at it, and that every index entry
// points to a record with that expiry; then runs CheckRecord and CheckMore.
func (k *Kind[R]) Check(tx kv.Tx, report func(string)) {
	expiries := map[string]time.Time{}
	corrupt := map[string]bool{} // reported once; their index entries are not
	if b := k.Records.Bucket(tx); b != nil {
		c := b.Cursor()
		for key, v := c.First(); key != nil; key, v = c.Next() {
			if v == nil {
				continue // a nested bucket
			}
			r, err := k.Decode(key, v, true)
			if err != nil {
				report(fmt.Sprintf("%s record %q: %v", k.KindName, key, err))
				corrupt[string(key)] = true
				continue
			}
			if k.CheckRecord != nil {
				k.CheckRecord(tx, key, r, report)
			}
			exp := k.ExpiresAt(r)
			if exp.IsZero() {
				continue
			}
			expiries[string(key)] = exp
			if !k.Expiry.Has(tx, exp, key) {
				report(fmt.Sprintf("%s record %q: no expiry-index entry at %s", k.KindName, key, exp.Format(time.RFC3339Nano)))
			}
		}
	}
	_ = k.Expiry.ForEach(tx, func(at time.Time, key []byte) error {
		exp, ok := expiries[string(key)]
		switch {
		case corrupt[string(key)]:
		case !ok:
			report(fmt.Sprintf("%s expiry-index entry %s %q: no such record", k.KindName, at.Format(time.RFC3339Nano), key))
		case !exp.Equal(at):
			report(fmt.Sprintf("%s expiry-index entry %s %q: record expires at %s", k.KindName, at.Format(time.RFC3339Nano), key, exp.Format(time.RFC3339Nano)))
		}
		return nil
	})
	if k.CheckMore != nil {
		k.CheckMore(tx, report)
	}
}

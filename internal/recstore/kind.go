package recstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// Kind implements kv.RecordKind for the records of one Spec, in whichever
// layout the database keeps them: it sweeps the log in its own (expiry)
// order, or the keyed layout through its expiry index, and checks either.
type Kind[R any] struct {
	Spec Spec
	// KindName is the kind's stable name, the one retention policies use.
	KindName string
	// Decode decodes a record's value; full asks for every field (the
	// check), otherwise what expiry needs is enough (the sweep).
	Decode func(scope, key string, v []byte, full bool) (R, error)
	// ExpiresAt returns when r stops counting.
	ExpiresAt func(r R) time.Time
	// Keep returns why an expired r must stay ("live lease"), or "" when it
	// may go. nil lets every expired record go.
	Keep func(r R, now time.Time) string
	// Removed, if set, runs in the sweep's transaction after the store
	// removed the record (counters kept beside the records).
	Removed func(tx kv.Tx, scope string, r R, v []byte) error
	// CheckRecord, if set, reports problems of one decoded record.
	CheckRecord func(tx kv.Tx, scope, key string, r R, report func(string))
	// CheckMore, if set, runs the kind's other invariants.
	CheckMore func(tx kv.Tx, report func(string))
}

var _ kv.RecordKind = (*Kind[struct{}])(nil)

// Cursors of Due say which layout they walk.
const (
	cursorLog   = 'L'
	cursorKeyed = 'K'
)

// Name returns KindName.
func (k *Kind[R]) Name() string { return k.KindName }

func (k *Kind[R]) logNS() keyspace.Namespace { return k.Spec.logNS() }

// both returns the kind's log and its tail as one bucket (tail.go).
func (k *Kind[R]) both(tx kv.Tx) kv.Bucket {
	return union(tx, k.logNS(), k.Spec.tailNS())
}

// usesLog reports whether tx's database keeps this kind in the log.
func (k *Kind[R]) usesLog(tx kv.Tx) bool { return InLog(tx, k.Spec) }

// InLog reports whether tx's database keeps spec's records in the log (it
// has the log bucket, which comes with the first record).
func InLog(tx kv.Tx, spec Spec) bool { return spec.logNS().Bucket(tx) != nil }

// keyedKind is the generic keyed-layout sweeper and checker for the kind.
func (k *Kind[R]) keyedKind() *keyspace.Kind[R] {
	ks := Keyed(k.Spec).(*keyed)
	return &keyspace.Kind[R]{
		KindName: k.KindName,
		Records:  ks.records,
		Expiry:   ks.expiry,
		Decode: func(key, v []byte, full bool) (R, error) {
			sc, ky, _ := splitKey(key)
			return k.Decode(string(sc), string(ky), v, full)
		},
		ExpiresAt: k.ExpiresAt,
		Keep:      k.Keep,
		Remove: func(tx kv.Tx, _ kv.Bucket, key []byte, r R) error {
			sc, ky, _ := splitKey(key)
			v := ks.records.Bucket(tx).Get(key)
			if err := ks.Delete(tx, string(sc), string(ky), Ref{key: key}, k.ExpiresAt(r)); err != nil {
				return err
			}
			if k.Removed != nil {
				return k.Removed(tx, string(sc), r, v)
			}
			return nil
		},
		CheckRecord: func(tx kv.Tx, key []byte, r R, report func(string)) {
			if k.CheckRecord != nil {
				sc, ky, _ := splitKey(key)
				k.CheckRecord(tx, string(sc), string(ky), r, report)
			}
		},
	}
}

// Due returns records due at now, in expiry order.
func (k *Kind[R]) Due(tx kv.Tx, now time.Time, after []byte, limit int) []kv.Due {
	if !k.usesLog(tx) {
		var inner []byte
		if len(after) > 0 && after[0] == cursorKeyed {
			inner = after[1:]
		}
		due := k.keyedKind().Due(tx, now, inner, limit)
		for i := range due {
			due[i].Cursor = append([]byte{cursorKeyed}, due[i].Cursor...)
		}
		return due
	}
	c := k.both(tx).Cursor()
	var key []byte
	if len(after) == 9 && after[0] == cursorLog {
		key, _ = c.Seek(after[1:])
		if key != nil && string(key) == string(after[1:]) {
			key, _ = c.Next()
		}
	} else {
		key, _ = c.First()
	}
	end := expirySec(now)
	var out []kv.Due
	for ; key != nil && len(out) < limit; key, _ = c.Next() {
		sec, ok := positionOf(key)
		if !ok {
			continue // reported by the check
		}
		if sec > end {
			break
		}
		pk := append([]byte(nil), key...)
		out = append(out, kv.Due{At: secTime(sec), Key: pk, Cursor: append([]byte{cursorLog}, pk...)})
	}
	return out
}

// Expire re-checks the record behind d and, unless dryRun, removes it when
// it is past its expiry and Keep lets it go.
func (k *Kind[R]) Expire(tx kv.Tx, d kv.Due, now time.Time, dryRun bool) (bool, string, error) {
	if len(d.Cursor) == 0 || d.Cursor[0] != cursorLog {
		return k.keyedKind().Expire(tx, d, now, dryRun)
	}
	b := k.both(tx)
	var v []byte
	if b != nil {
		v = b.Get(d.Key)
	}
	if v == nil {
		return false, "index mismatch", nil
	}
	scope, key, payload, ok := unwrap(v)
	if !ok || !intact(v) {
		return false, "corrupt", nil
	}
	r, err := k.Decode(string(scope), string(key), payload, false)
	if err != nil {
		return false, "corrupt", nil // reported by the check; never deleted blindly
	}
	exp := k.ExpiresAt(r)
	sec, _ := positionOf(d.Key)
	switch {
	case expirySec(exp) != sec:
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
	payload = append([]byte(nil), payload...) // Removed may need it after the delete
	if err := b.Delete(d.Key); err != nil {
		return false, "", err
	}
	if s := logOf(tx, k.Spec.Name); s != nil {
		s.retire(tx, s.dir.hashBytes(scope, key), binary.BigEndian.Uint64(d.Key))
	}
	if k.Removed != nil {
		if err := k.Removed(tx, string(scope), r, payload); err != nil {
			return false, "", err
		}
	}
	return true, "", nil
}

// Check verifies the kind's records in either layout. In the log: every
// key is a position, every entry is intact and decodes, sits at the second
// it expires in, and no (scope, key) has two entries; no format-1 record is
// left; and when this process has the log open, the directory finds every
// record. In the keyed layout: every record has its expiry-index entry and
// back.
func (k *Kind[R]) Check(tx kv.Tx, report func(string)) {
	if !k.usesLog(tx) {
		k.keyedKind().Check(tx, report)
	} else {
		k.checkLog(tx, report)
	}
	if k.CheckMore != nil {
		k.CheckMore(tx, report)
	}
}

func (k *Kind[R]) checkLog(tx kv.Tx, report func(string)) {
	ks := Keyed(k.Spec).(*keyed)
	if b := ks.records.Bucket(tx); b != nil {
		if first, _ := b.Cursor().First(); first != nil {
			report(fmt.Sprintf("%s: records of the format-1 layout remain beside the log (an unfinished migration)", k.KindName))
		}
	}
	open := logOf(tx, k.Spec.Name)
	seen := map[string]bool{}
	c := k.both(tx).Cursor()
	var last []byte
	for pos, v := c.First(); pos != nil; pos, v = c.Next() {
		if bytes.Equal(pos, last) {
			report(fmt.Sprintf("%s log entry %x: in the log and in its tail", k.KindName, pos))
		}
		last = pos
		sec, ok := positionOf(pos)
		if !ok {
			report(fmt.Sprintf("%s log: key %x is not a log position", k.KindName, pos))
			continue
		}
		scope, key, payload, ok := unwrap(v)
		if !ok || !intact(v) {
			report(fmt.Sprintf("%s log entry %x: damaged (checksum or framing); oncekv drop --kind %s %x removes it", k.KindName, pos, k.KindName, pos))
			continue
		}
		r, err := k.Decode(string(scope), string(key), payload, true)
		if err != nil {
			report(fmt.Sprintf("%s record %q/%q (log entry %x): %v; oncekv drop --kind %s %x removes it", k.KindName, scope, key, pos, err, k.KindName, pos))
			continue
		}
		if exp := k.ExpiresAt(r); expirySec(exp) != sec {
			report(fmt.Sprintf("%s record %q/%q: log entry %x is at second %d but the record expires at %s", k.KindName, scope, key, pos, sec, exp.Format(time.RFC3339Nano)))
		}
		id := string(scope) + "\x00" + string(key)
		if seen[id] {
			report(fmt.Sprintf("%s record %q/%q: two log entries", k.KindName, scope, key))
		}
		seen[id] = true
		if open != nil {
			if ref, _, err := open.Get(tx, string(scope), string(key)); err != nil || ref.pos != binary.BigEndian.Uint64(pos) {
				report(fmt.Sprintf("%s record %q/%q: the in-memory directory does not find log entry %x (%v)", k.KindName, scope, key, pos, err))
			}
		}
		if k.CheckRecord != nil {
			k.CheckRecord(tx, string(scope), string(key), r, report)
		}
	}
}

// Scan calls fn for every record of spec in tx, in whichever layout the
// database keeps them (see Store.Scan), for code that holds a transaction
// and no Store.
func Scan(tx kv.Tx, spec Spec, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	log := spec.logNS()
	if log.Bucket(tx) != nil {
		scanLog(tx, log, spec.tailNS(), prefix, false, fn)
		return
	}
	Keyed(spec).Scan(tx, prefix, fn)
}

// List is Scan for listings (see Store.List): an entry whose checksum
// fails is reported too.
func List(tx kv.Tx, spec Spec, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	log := spec.logNS()
	if log.Bucket(tx) != nil {
		scanLog(tx, log, spec.tailNS(), prefix, true, fn)
		return
	}
	Keyed(spec).List(tx, prefix, fn)
}

// Locate returns the bucket and key under which the record of (scope, key)
// is stored in tx, in whichever layout, for tools and tests that work on
// the raw bytes. It scans the log (no directory).
func Locate(tx kv.Tx, spec Spec, scope, key string) (bucket, k []byte, ok bool) {
	log := spec.logNS()
	if log.Bucket(tx) == nil {
		ks := Keyed(spec).(*keyed)
		jk := JoinKey(scope, key)
		if b := ks.records.Bucket(tx); b != nil && b.Get(jk) != nil {
			return ks.records.Bytes(), jk, true
		}
		return nil, nil, false
	}
	tail := spec.tailNS()
	scanLog(tx, log, tail, scope, false, func(ref Ref, sc, ky string, _ []byte, ok bool) bool {
		if ok && sc == scope && ky == key {
			bucket, k = log.Bytes(), ref.Cursor()
			if b := tail.Bucket(tx); b != nil && b.Get(k) != nil {
				bucket = tail.Bytes()
			}
			return false
		}
		return true
	})
	return bucket, k, bucket != nil
}

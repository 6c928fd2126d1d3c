package recstore

import (
	"context"
	"slices"
	"time"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// keyed is the direct layout: records under scope NUL key in bucket Name,
// entries (expiry, scope NUL key) in the time index Name+".expiry". Backends
// with several writers use it; so did every file of format 1.
type keyed struct {
	spec    Spec
	records keyspace.Namespace
	expiry  keyspace.TimeIndex
}

// KeyOf returns the bucket and key under which the keyed layout keeps the
// record of (scope, key): what a watch on a backend with several writers
// (kv.Traits.Watch) follows.
func KeyOf(spec Spec, scope, key string) (bucket, k []byte) {
	return keyspace.New(spec.Name).Bytes(), JoinKey(scope, key)
}

// Keyed returns the keyed layout of spec.
func Keyed(spec Spec) Store {
	return &keyed{spec: spec, records: keyspace.New(spec.Name), expiry: keyspace.NewTimeIndex(spec.Name + ".expiry")}
}

var _ Store = (*keyed)(nil)

func (s *keyed) Layout() string { return "keyed" }
func (s *keyed) Stats() Stats   { return Stats{Layout: "keyed"} }
func (s *keyed) Tally() *Tally  { return nil }

func (s *keyed) Probe(string, string) (Probe, bool) { return Probe{}, true }

// Cached never answers: several writers share the store.
func (s *keyed) Cached(context.Context, Probe, string, string) (Ref, []byte, bool) {
	return Ref{}, nil, false
}

func (s *keyed) GetProbed(tx kv.Tx, scope, key string, _ Probe) (Ref, []byte, error) {
	return s.Get(tx, scope, key)
}

func (s *keyed) Get(tx kv.Tx, scope, key string) (Ref, []byte, error) {
	b := s.records.Bucket(tx)
	if b == nil {
		return Ref{}, nil, nil
	}
	k := JoinKey(scope, key)
	v := b.Get(k)
	if v == nil {
		return Ref{}, nil, nil
	}
	return Ref{key: k}, v, nil
}

func (s *keyed) Put(_ context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, value []byte) (Ref, error) {
	b, err := s.records.Create(tx)
	if err != nil {
		return Ref{}, err
	}
	ref := prev
	if ref.IsZero() {
		ref = Ref{key: JoinKey(scope, key)}
		prevExpiry = time.Time{}
	}
	if err := b.Put(ref.key, value); err != nil {
		return Ref{}, err
	}
	return ref, s.expiry.Move(tx, prevExpiry, expiry, ref.key)
}

// Frame returns buf[:0] with room bytes of room: a keyed record is its
// value alone.
func (s *keyed) Frame(buf []byte, _, _ string, room int) []byte { return slices.Grow(buf[:0], room) }

// PutFramed is Put: the frame has no head.
func (s *keyed) PutFramed(ctx context.Context, tx kv.Tx, scope, key string, prev Ref, prevExpiry, expiry time.Time, framed []byte) (Ref, error) {
	return s.Put(ctx, tx, scope, key, prev, prevExpiry, expiry, framed)
}

func (s *keyed) Delete(tx kv.Tx, _, _ string, ref Ref, expiry time.Time) error {
	if b := s.records.Bucket(tx); b != nil {
		if err := b.Delete(ref.key); err != nil {
			return err
		}
	}
	return s.expiry.Delete(tx, expiry, ref.key)
}

// List is Scan: a keyed record has no framing of its own to check (its
// value carries the kind's checksum).
func (s *keyed) List(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	s.Scan(tx, prefix, fn)
}

func (s *keyed) Scan(tx kv.Tx, prefix string, fn func(ref Ref, scope, key string, v []byte, ok bool) bool) {
	b := s.records.Bucket(tx)
	if b == nil {
		return
	}
	c := kv.RangeCursor(b, []byte(prefix), kv.PrefixEnd([]byte(prefix))) // every key it gives begins with prefix
	for k, v := c.First(); k != nil; k, v = c.Next() {
		sc, ky, ok := splitKey(k)
		if !fn(Ref{key: k}, string(sc), string(ky), v, ok) {
			return
		}
	}
}

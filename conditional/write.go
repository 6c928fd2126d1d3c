package conditional

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

// Insert stores v under a new ID at version 1. An ID in use returns an
// *ExistsError; a key already held in a unique index returns a
// *UniqueViolationError naming the index and the row that holds it. Nothing
// is written in either case.
func (t *Table[T]) Insert(ctx context.Context, id string, v T) (Row[T], error) {
	return managed(ctx, t, func(tx kv.Tx) (Row[T], error) { return t.InsertTx(tx, id, v) })
}

// InsertTx is Insert inside the caller's writable transaction.
func (t *Table[T]) InsertTx(tx kv.Tx, id string, v T) (Row[T], error) {
	if err := validID(id); err != nil {
		return Row[T]{}, err
	}
	t.prefetch(tx, id, v, true)
	cur, ok, err := t.load(tx, id)
	if err != nil {
		return Row[T]{}, err
	}
	if ok {
		return Row[T]{}, &ExistsError{Table: t.name, ID: id, Version: cur.version}
	}
	p, err := t.prepare(tx, id, v)
	if err != nil {
		return Row[T]{}, err
	}
	if err := t.write(tx, id, 1, p, nil); err != nil {
		return Row[T]{}, err
	}
	return Row[T]{ID: id, Version: 1, Value: v}, nil
}

// UpdateFunc decides what an upsert that found an existing row changes. It
// gets the stored value and the value the caller tried to create, and
// returns the new value and whether it differs. It may run more than once.
type UpdateFunc[T any] func(existing, incoming T) (T, bool)

// UpsertResult tells what an upsert did.
type UpsertResult[T any] struct {
	// Row is the row after the upsert: the new one, the updated one, or the
	// existing one left as it was.
	Row Row[T]
	// Created is true when no row had the key and v was inserted.
	Created bool
	// Updated is true when an existing row was changed by the UpdateFunc.
	Updated bool
}

// Upsert is insert-or-update against a unique index: if a row already has
// v's key in the named index, the create collapses into that row (update
// decides what changes; nil leaves it as it is) and its ID is returned;
// otherwise v is inserted under id. A repeated create therefore never makes
// a second row, whatever ID the retry carries.
func (t *Table[T]) Upsert(ctx context.Context, index, id string, v T, update UpdateFunc[T]) (UpsertResult[T], error) {
	return managed(ctx, t, func(tx kv.Tx) (UpsertResult[T], error) { return t.UpsertTx(tx, index, id, v, update) })
}

// UpsertTx is Upsert inside the caller's writable transaction.
func (t *Table[T]) UpsertTx(tx kv.Tx, index, id string, v T, update UpdateFunc[T]) (UpsertResult[T], error) {
	i, err := t.indexPos(index)
	if err != nil {
		return UpsertResult[T]{}, err
	}
	key, ok := t.indexes[i].Key(v)
	if !ok {
		return UpsertResult[T]{}, fmt.Errorf("%w: %s.%s", ErrNotIndexed, t.name, index)
	}
	t.prefetch(tx, id, v, true) // the key looked up among them, and what an insert reads
	existingID, err := t.lookupIndex(tx, i, key)
	if errors.Is(err, ErrNotFound) {
		r, err := t.InsertTx(tx, id, v)
		return UpsertResult[T]{Row: r, Created: err == nil}, err
	}
	if err != nil {
		return UpsertResult[T]{}, err
	}
	cur, found, err := t.load(tx, existingID)
	if err != nil {
		return UpsertResult[T]{}, err
	}
	if !found {
		return UpsertResult[T]{}, t.brokenIndex(i, key, existingID, "which does not exist")
	}
	row, err := t.decode(existingID, cur)
	if err == nil {
		err = t.indexedAs(i, key, row) // never another row updated for this one
	}
	if err != nil {
		return UpsertResult[T]{}, err
	}
	if update == nil {
		return UpsertResult[T]{Row: row}, nil
	}
	nv, changed := update(row.Value, v)
	if !changed {
		return UpsertResult[T]{Row: row}, nil
	}
	r, err := t.replace(tx, existingID, cur, nv)
	return UpsertResult[T]{Row: r, Updated: err == nil && r.Version != cur.version}, err
}

// replace writes nv over the stored row cur at the next version, unless the
// encoding is unchanged (then nothing is written and the version stays).
func (t *Table[T]) replace(tx kv.Tx, id string, cur storedRow, nv T) (Row[T], error) {
	p, err := t.prepare(tx, id, nv)
	if err != nil {
		return Row[T]{}, err
	}
	if bytes.Equal(p.value, cur.value) {
		return Row[T]{ID: id, Version: cur.version, Value: nv}, nil
	}
	if err := t.write(tx, id, cur.version+1, p, &cur); err != nil {
		return Row[T]{}, err
	}
	return Row[T]{ID: id, Version: cur.version + 1, Value: nv}, nil
}

// CASResult is the outcome of a conditional write. When Applied is false
// nothing was written and Row holds the current state (Found false if the
// row does not exist): the "zero rows affected, read back" pattern as a
// result, not an error.
type CASResult[T any] struct {
	Applied bool
	Found   bool
	Row     Row[T]
}

// CompareAndSet sets row id to v and its version to expected+1, only if its
// version is expected. expected 0 means "only if the row does not exist"
// (an insert that never overwrites). On a version mismatch nothing is
// written and the result carries the current row.
func (t *Table[T]) CompareAndSet(ctx context.Context, id string, expected uint64, v T) (CASResult[T], error) {
	return managed(ctx, t, func(tx kv.Tx) (CASResult[T], error) { return t.CompareAndSetTx(tx, id, expected, v) })
}

// CompareAndSetTx is CompareAndSet inside the caller's writable transaction.
func (t *Table[T]) CompareAndSetTx(tx kv.Tx, id string, expected uint64, v T) (CASResult[T], error) {
	if err := validID(id); err != nil {
		return CASResult[T]{}, err
	}
	t.prefetch(tx, id, v, false)
	cur, found, err := t.load(tx, id)
	if err != nil {
		return CASResult[T]{}, err
	}
	if !found {
		if expected != 0 {
			return CASResult[T]{}, nil
		}
		r, err := t.InsertTx(tx, id, v)
		return CASResult[T]{Applied: err == nil, Found: err == nil, Row: r}, err
	}
	if cur.version != expected {
		row, err := t.decode(id, cur)
		return CASResult[T]{Found: true, Row: row}, err
	}
	p, err := t.prepare(tx, id, v)
	if err != nil {
		return CASResult[T]{}, err
	}
	if err := t.write(tx, id, cur.version+1, p, &cur); err != nil {
		return CASResult[T]{}, err
	}
	return CASResult[T]{Applied: true, Found: true, Row: Row[T]{ID: id, Version: cur.version + 1, Value: v}}, nil
}

// Cond is an optional precondition for Assign and Delete.
type Cond struct {
	// IfVersion, when non-zero, applies the write only if the row's version
	// is IfVersion.
	IfVersion uint64
}

// Assign sets row id to the target state v (absolute assignment: "status =
// paid", not "add 10"). Assigning the state the row already has writes
// nothing and keeps the version, so repeating an assignment is harmless.
// With cond.IfVersion set, a row at another version is left alone and the
// result carries it. A missing row returns ErrNotFound: create rows with
// Insert or Upsert.
func (t *Table[T]) Assign(ctx context.Context, id string, v T, cond Cond) (CASResult[T], error) {
	return t.AssignField(ctx, id, func(p *T) { *p = v }, cond)
}

// AssignTx is Assign inside the caller's writable transaction.
func (t *Table[T]) AssignTx(tx kv.Tx, id string, v T, cond Cond) (CASResult[T], error) {
	return t.AssignFieldTx(tx, id, func(p *T) { *p = v }, cond)
}

// AssignField is Assign for part of a value: set receives a copy of the
// current value and sets fields to their target state (o.Status = "paid").
// set must assign, not accumulate: it may run more than once.
func (t *Table[T]) AssignField(ctx context.Context, id string, set func(*T), cond Cond) (CASResult[T], error) {
	return managed(ctx, t, func(tx kv.Tx) (CASResult[T], error) { return t.AssignFieldTx(tx, id, set, cond) })
}

// AssignFieldTx is AssignField inside the caller's writable transaction.
func (t *Table[T]) AssignFieldTx(tx kv.Tx, id string, set func(*T), cond Cond) (CASResult[T], error) {
	if err := validID(id); err != nil {
		return CASResult[T]{}, err
	}
	cur, found, err := t.load(tx, id)
	if err != nil {
		return CASResult[T]{}, err
	}
	if !found {
		return CASResult[T]{}, ErrNotFound
	}
	row, err := t.decode(id, cur)
	if err != nil {
		return CASResult[T]{}, err
	}
	if cond.IfVersion != 0 && cur.version != cond.IfVersion {
		return CASResult[T]{Found: true, Row: row}, nil
	}
	nv := row.Value
	set(&nv)
	r, err := t.replace(tx, id, cur, nv)
	if err != nil {
		return CASResult[T]{}, err
	}
	return CASResult[T]{Applied: true, Found: true, Row: r}, nil
}

// Delete removes row id and its index entries. With cond.IfVersion set, a
// row at another version is left alone. Deleting a missing row is not an
// error: the result has Found false.
func (t *Table[T]) Delete(ctx context.Context, id string, cond Cond) (CASResult[T], error) {
	return managed(ctx, t, func(tx kv.Tx) (CASResult[T], error) { return t.DeleteTx(tx, id, cond) })
}

// DeleteTx is Delete inside the caller's writable transaction.
func (t *Table[T]) DeleteTx(tx kv.Tx, id string, cond Cond) (CASResult[T], error) {
	if err := validID(id); err != nil {
		return CASResult[T]{}, err
	}
	cur, found, err := t.load(tx, id)
	if err != nil || !found {
		return CASResult[T]{}, err
	}
	row, err := t.decode(id, cur)
	if err != nil {
		return CASResult[T]{}, err
	}
	if cond.IfVersion != 0 && cur.version != cond.IfVersion {
		return CASResult[T]{Found: true, Row: row}, nil
	}
	if err := t.remove(tx, id, cur); err != nil {
		return CASResult[T]{}, err
	}
	return CASResult[T]{Applied: true, Found: true, Row: row}, nil
}

// DefaultModifyAttempts is how many times Modify retries a lost race.
const DefaultModifyAttempts = 10

// Modify applies a relative change ("add 10") as a compare-and-set loop:
// read the row, compute fn(value), write it only if the version has not
// moved, and try again (up to attempts times; 0 means DefaultModifyAttempts)
// when it has. It returns ErrConflict when every attempt lost.
//
// Modify is not retry-safe: if the caller retries after a timeout, the
// change may be applied twice. Use it only under an idempotency key (for
// example inside ledger.Do), or prefer Assign with a target state.
func (t *Table[T]) Modify(ctx context.Context, id string, fn func(T) (T, error), attempts int) (Row[T], error) {
	if attempts <= 0 {
		attempts = DefaultModifyAttempts
	}
	for range attempts {
		cur, err := t.Get(ctx, id)
		if err != nil {
			return Row[T]{}, err
		}
		nv, err := fn(cur.Value)
		if err != nil {
			return Row[T]{}, err
		}
		res, err := t.CompareAndSet(ctx, id, cur.Version, nv)
		if err != nil {
			return Row[T]{}, err
		}
		if res.Applied {
			return res.Row, nil
		}
		if !res.Found {
			return Row[T]{}, ErrNotFound
		}
	}
	return Row[T]{}, fmt.Errorf("%w: %s row %q: %d attempts", ErrConflict, t.name, id, attempts)
}

// prefetch reads, in one request where the backend reads by requests
// (etcd: one round trip instead of one a key), row id and the entries
// under v's index keys: what a write of v as row id reads first (the
// row's version, then each unique index's owner). Elsewhere it does
// nothing, and builds nothing. absent says they are expected not to exist
// (an insert's, an upsert's), which a backend may take without reading
// them (kv.BucketKey.Absent): on etcd a new row's write is then one round
// trip, its commit.
func (t *Table[T]) prefetch(tx kv.Tx, id string, v T, absent bool) {
	p := keyspace.Prefetcher(tx)
	if p == nil {
		return
	}
	keys := []kv.BucketKey{{Bucket: t.rows.Bytes(), Key: []byte(id), Absent: absent}}
	for i, ix := range t.indexes {
		if k, ok := ix.Key(v); ok && len(k) > 0 && len(k) <= MaxIndexKeyLen {
			keys = append(keys, kv.BucketKey{Bucket: t.idxNS[i].Bytes(), Key: k, Absent: absent})
		}
	}
	p(keys)
}

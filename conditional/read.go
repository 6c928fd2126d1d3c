package conditional

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/internal/txn"
	"github.com/oncekv/oncekv/kv"
)

// Get returns the row with the given ID, or ErrNotFound.
func (t *Table[T]) Get(ctx context.Context, id string) (Row[T], error) {
	r, err := txn.Run(ctx, t.db.View, func(tx kv.Tx) (Row[T], error) { return t.GetTx(tx, id) })
	return r, err
}

// GetTx is Get inside the caller's transaction.
func (t *Table[T]) GetTx(tx kv.Tx, id string) (Row[T], error) {
	if err := validID(id); err != nil {
		return Row[T]{}, err
	}
	sr, ok, err := t.load(tx, id)
	if err != nil {
		return Row[T]{}, err
	}
	if !ok {
		return Row[T]{}, ErrNotFound
	}
	return t.decode(id, sr)
}

// GetByIndex returns the row whose key in the named unique index is key, or
// ErrNotFound.
func (t *Table[T]) GetByIndex(ctx context.Context, index string, key []byte) (Row[T], error) {
	r, err := txn.Run(ctx, t.db.View, func(tx kv.Tx) (Row[T], error) { return t.GetByIndexTx(tx, index, key) })
	return r, err
}

// GetByIndexTx is GetByIndex inside the caller's transaction. The row
// found is checked against the index (indexedAs): a damaged entry is an
// error wrapping kv.ErrCorrupt, never another row returned for this key.
func (t *Table[T]) GetByIndexTx(tx kv.Tx, index string, key []byte) (Row[T], error) {
	i, err := t.indexPos(index)
	if err != nil {
		return Row[T]{}, err
	}
	id, err := t.lookupIndex(tx, i, key)
	if err != nil {
		return Row[T]{}, err
	}
	r, err := t.GetTx(tx, id)
	if errors.Is(err, ErrNotFound) {
		return Row[T]{}, t.brokenIndex(i, key, id, "which does not exist")
	}
	if err != nil {
		return Row[T]{}, err
	}
	return r, t.indexedAs(i, key, r)
}

// lookupIndex returns the row ID index i holds under key, or ErrNotFound.
func (t *Table[T]) lookupIndex(tx kv.Tx, i int, key []byte) (string, error) {
	ib := t.idxNS[i].Bucket(tx)
	if ib == nil {
		return "", ErrNotFound
	}
	id := ib.Get(key)
	if id == nil {
		return "", ErrNotFound
	}
	return string(id), nil
}

// indexedAs checks that r, the row index i's entry under key leads to, has
// key there itself: an entry that names another row (a damaged ID) is
// damage, or a lookup would answer, or an upsert change, another row.
func (t *Table[T]) indexedAs(i int, key []byte, r Row[T]) error {
	if own, ok := t.indexes[i].Key(r.Value); !ok || !bytes.Equal(own, key) {
		return t.brokenIndex(i, key, r.ID, fmt.Sprintf("whose key there is %q", own))
	}
	return nil
}

// brokenIndex is the error for index i's entry under key, naming row id,
// which is not what it leads to.
func (t *Table[T]) brokenIndex(i int, key []byte, id, what string) error {
	return &kv.CorruptError{Kind: record.KindVersioned, Reason: fmt.Sprintf("%s: index %s maps %q to row %q, %s", t.name, t.indexes[i].Name, key, id, what)}
}

// All iterates the table's rows in ID order inside tx. A row that fails to
// decode is yielded as an error and the iteration goes on.
func (t *Table[T]) All(tx kv.Tx) iter.Seq2[Row[T], error] { return t.Range(tx, "", "") }

// Range iterates, in ID order inside tx, the rows whose IDs lie in
// [from, to), to "" meaning to the last row; the rows whose IDs begin with
// p are Range(tx, p, string(kv.PrefixEnd([]byte(p)))). A row that fails to
// decode is yielded as an error and the iteration goes on.
//
// Read a group of rows (a customer's orders, under IDs that begin with
// the customer's) through Range rather than through All with a test that
// stops at the group's end. On bbolt the two cost the same; on etcd a
// write transaction is refused at its commit when a key it read changed,
// and an iteration stopped early has still read a page of rows past the
// group (or all to the end of the table): every new row there would
// refuse it. Range reads the group alone (kv.RangeCursor).
func (t *Table[T]) Range(tx kv.Tx, from, to string) iter.Seq2[Row[T], error] {
	return func(yield func(Row[T], error) bool) {
		b := t.rows.Bucket(tx)
		if b == nil {
			return
		}
		ring := kv.CipherOf(tx)
		var hi []byte
		if to != "" {
			hi = []byte(to)
		}
		c := kv.RangeCursor(b, []byte(from), hi)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			sr, err := decodeRow(v)
			if err == nil {
				err = sr.open(ring, t.name, string(k))
			}
			var r Row[T]
			if err == nil {
				r, err = t.decode(string(k), sr)
			} else {
				err = fmt.Errorf("conditional: %s: row %q: %w", t.name, k, err)
			}
			if !yield(r, err) {
				return
			}
		}
	}
}

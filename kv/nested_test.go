package kv_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
)

// A write started with a context marked as inside a write transaction of
// the same database (WithinTx) is refused with ErrNestedTx, at once: in
// bbolt it would wait for the writer its own caller holds, for ever. Reads
// go on, other databases are not concerned, and the mark ends with its
// transaction.
func TestNestedWriteIsRefused(t *testing.T) {
	t.Parallel()
	open := func(name string) *kv.DB {
		db, err := kv.Open(filepath.Join(t.TempDir(), name), &kv.Options{NoSync: true})
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	db, other := open("a.db"), open("b.db")
	noop := func(kv.Tx) error { return nil }

	require.NoError(t, db.Update(ctx, func(kv.Tx) error {
		inner := db.WithinTx(ctx)
		defer inner.End()
		derived, cancel := context.WithCancel(inner)
		defer cancel()
		require.ErrorIs(t, db.Update(derived, noop), kv.ErrNestedTx)
		require.ErrorIs(t, db.Batch(derived, noop), kv.ErrNestedTx)
		require.NoError(t, other.Update(derived, noop), "another database")
		require.NoError(t, other.Batch(derived, noop), "another database")

		// A mark for the other database, inside: the outer one still holds.
		deeper := other.WithinTx(derived)
		defer deeper.End()
		require.ErrorIs(t, db.Update(deeper, noop), kv.ErrNestedTx)
		require.ErrorIs(t, other.Update(deeper, noop), kv.ErrNestedTx)
		return nil
	}))

	require.NoError(t, db.View(ctx, func(kv.Tx) error {
		inner := db.WithinTx(ctx)
		defer inner.End()
		return db.View(inner, noop)
	}), "a read inside is not refused")

	inner := db.WithinTx(ctx)
	inner.End()
	require.NoError(t, db.Update(inner, noop), "the mark ended with its transaction")
	require.NoError(t, db.Batch(inner, noop))

	// Resumed inside a later transaction, it marks again until its End.
	require.NoError(t, db.Update(ctx, func(kv.Tx) error {
		inner.Resume()
		defer inner.End()
		require.ErrorIs(t, db.Batch(inner, noop), kv.ErrNestedTx)
		return nil
	}))
	require.NoError(t, db.Update(inner, noop))
}

package kv_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/rerun"
	"github.com/oncekv/oncekv/internal/testwait"
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

// With Options.CheckNesting, a write started inside a write transaction's
// function on its goroutine is refused whatever its context: in Update, in
// a batch (whose leader runs every call's function), and through a
// several-calls batch. Another goroutine's write waits for the writer as
// always, and without the option the nested write waits too (here until
// its deadline; with a context that never ends, for ever).
func TestCheckNestingRefusesAnUnmarkedNestedWrite(t *testing.T) {
	t.Parallel()
	open := func(name string, check bool) *kv.DB {
		db, err := kv.Open(filepath.Join(t.TempDir(), name), &kv.Options{NoSync: true, CheckNesting: check})
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	db := open("a.db", true)
	put := func(k string) func(kv.Tx) error {
		return func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), []byte("v"))
		}
	}
	// Unmarked contexts (bounded, so that a check that fails ends the
	// test at the deadline instead of hanging it).
	nested := func(tx kv.Tx) error {
		unmarked, cancel := context.WithTimeout(context.Background(), testwait.Bound)
		defer cancel()
		require.ErrorIs(t, db.Update(unmarked, put("nested")), kv.ErrNestedTx)
		require.ErrorIs(t, db.Batch(unmarked, put("nested")), kv.ErrNestedTx)
		return put("outer")(tx)
	}
	require.NoError(t, db.Update(ctx, nested))
	require.NoError(t, db.Batch(ctx, nested))

	// Another goroutine's write is not nested: it waits for the writer.
	held, release := make(chan struct{}), make(chan struct{})
	heldOnce := sync.OnceFunc(func() { close(held) })
	done := make(chan error, 1)
	go func() {
		done <- db.Update(ctx, func(tx kv.Tx) error { heldOnce(); <-release; return put("holder")(tx) })
	}()
	testwait.Receive(t, held, "the writer held")
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, db.Update(short, put("waiter")), context.DeadlineExceeded, "it waited, and was not refused")
	close(release)
	require.NoError(t, testwait.Receive(t, done, "the holder's commit"))
	require.NoError(t, db.Update(ctx, put("after")), "nothing left marked")
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("b"))
		for _, k := range []string{"outer", "holder", "after"} {
			require.NotNil(t, b.Get([]byte(k)), k)
		}
		require.Nil(t, b.Get([]byte("nested")))
		return nil
	}))

	// Without the option, the same nested write waits for the writer its
	// own caller holds; the rerun build turns the option on for every
	// database, and refuses it.
	plain := open("b.db", false)
	want := context.DeadlineExceeded
	if rerun.Enabled {
		want = kv.ErrNestedTx
	}
	require.NoError(t, plain.Update(ctx, func(kv.Tx) error {
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, plain.Update(short, put("nested")), want)
		return nil
	}))
}

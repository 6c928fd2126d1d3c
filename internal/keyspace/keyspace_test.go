package keyspace_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/internal/keyspace"
	"github.com/oncekv/oncekv/kv"
)

var ctx = context.Background()

func open(t *testing.T) *kv.DB {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "k.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Expiries: a negative retention or one past MaxRetention is Never; an
// expiry that would land after Never is Never; otherwise t + retention.
func TestExpiryAt(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	require.Equal(t, t0, keyspace.ExpiryAt(t0, 0))
	require.Equal(t, t0.Add(time.Hour), keyspace.ExpiryAt(t0, time.Hour))
	require.Equal(t, t0.Add(keyspace.MaxRetention), keyspace.ExpiryAt(t0, keyspace.MaxRetention))
	require.Equal(t, keyspace.Never, keyspace.ExpiryAt(t0, keyspace.MaxRetention+1))
	require.Equal(t, keyspace.Never, keyspace.ExpiryAt(t0, -1))
	near := keyspace.Never.Add(-time.Hour)
	require.Equal(t, keyspace.Never, keyspace.ExpiryAt(near, 2*time.Hour))
	require.Equal(t, keyspace.Never, keyspace.ExpiryAt(near, time.Hour), "exactly Never")
	require.Equal(t, near.Add(time.Minute), keyspace.ExpiryAt(near, time.Minute))
}

// A time index: entries sort by time (before 1970 too), Due returns those
// at or before now in order, in batches that resume after a cursor; Move,
// Delete, Has, First and ForEach keep to the entries.
func TestTimeIndex(t *testing.T) {
	db := open(t)
	x := keyspace.NewTimeIndex("test.expiry")
	require.Equal(t, "test.expiry", x.Namespace().Name())
	base := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	times := []time.Time{base.Add(2 * time.Hour), time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), base, base.Add(time.Hour), base.Add(time.Hour)}
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		_, ok := x.First(tx)
		require.False(t, ok, "empty")
		require.Nil(t, x.Due(tx, base, nil, 10))
		require.False(t, x.Has(tx, base, []byte("k0")))
		return x.ForEach(tx, func(time.Time, []byte) error { t.Fatal("empty index"); return nil })
	}))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		require.NoError(t, x.Delete(tx, base, []byte("none")), "deleting from a missing bucket")
		for i, at := range times {
			require.NoError(t, x.Put(tx, at, fmt.Appendf(nil, "k%d", i)))
		}
		return nil
	}))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		first, ok := x.First(tx)
		require.True(t, ok)
		require.Equal(t, times[1], first, "1960 sorts first")
		var order []string
		require.NoError(t, x.ForEach(tx, func(_ time.Time, k []byte) error { order = append(order, string(k)); return nil }))
		require.Equal(t, []string{"k1", "k2", "k3", "k4", "k0"}, order)

		due := x.Due(tx, base.Add(time.Hour), nil, 2) // at or before base+1h: k1, k2, k3, k4
		require.Len(t, due, 2)
		require.Equal(t, "k1", string(due[0].Key))
		require.Equal(t, "k2", string(due[1].Key))
		require.Equal(t, base, due[1].At)
		more := x.Due(tx, base.Add(time.Hour), due[1].Cursor, 10)
		require.Len(t, more, 2, "an entry exactly at now is due; one after it is not")
		require.Equal(t, "k3", string(more[0].Key))
		require.Empty(t, x.Due(tx, base.Add(time.Hour), more[1].Cursor, 10))
		require.True(t, x.Has(tx, base, []byte("k2")))
		require.False(t, x.Has(tx, base, []byte("k")), "a prefix of a key is not the key")
		return nil
	}))
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		require.NoError(t, x.Move(tx, base, base, []byte("k2")), "same time: nothing to do")
		require.True(t, x.Has(tx, base, []byte("k2")))
		require.NoError(t, x.Move(tx, base, base.Add(3*time.Hour), []byte("k2")))
		require.False(t, x.Has(tx, base, []byte("k2")))
		require.True(t, x.Has(tx, base.Add(3*time.Hour), []byte("k2")))
		require.NoError(t, x.Move(tx, time.Time{}, base.Add(4*time.Hour), []byte("new")), "from zero: a new entry")
		require.True(t, x.Has(tx, base.Add(4*time.Hour), []byte("new")))
		require.NoError(t, x.Delete(tx, times[1], []byte("k1")))
		first, _ := x.First(tx)
		require.Equal(t, base.Add(time.Hour), first)
		return nil
	}))
	_, _, err := keyspace.SplitTimeKey([]byte{1, 2, 3})
	require.Error(t, err)
	// Eight bytes are a time and an empty key: short only below that.
	at, k, err := keyspace.SplitTimeKey([]byte{0x80, 0, 0, 0, 0, 0, 0, 0})
	require.NoError(t, err)
	require.Equal(t, time.Unix(0, 0).UTC(), at)
	require.Empty(t, k)
}

// Namespaces live under the reserved prefix, are listed by prefix, and
// carry the format record.
func TestNamespacesAndFormat(t *testing.T) {
	db := open(t)
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		for _, n := range []string{"table/a", "table/b", "tablet", "other"} {
			_, err := keyspace.New(n).Create(tx)
			require.NoError(t, err)
		}
		return nil
	}))
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		var names []string
		for _, ns := range keyspace.List(tx, "table/") {
			names = append(names, ns.Name())
			require.NotNil(t, ns.Bucket(tx))
		}
		require.Equal(t, []string{"table/a", "table/b"}, names)
		require.Nil(t, tx.Bucket(keyspace.New("table/a").Bytes()), "hidden from the caller's transaction")
		require.Nil(t, keyspace.New("missing").Bucket(tx))
		_, err := keyspace.New("missing").Create(tx)
		require.ErrorIs(t, err, kv.ErrTxNotWritable, "the port's error for a write in a read-only transaction")
		v, err := keyspace.StoredFormat(tx)
		require.NoError(t, err)
		require.Equal(t, uint32(kv.FormatVersion), v)
		return nil
	}))
}

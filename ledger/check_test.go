package ledger_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// The consistency check finds a record whose expiry-index entry is missing,
// an index entry without a record, and a record that fails to decode.
func TestCheckFindsBrokenIndexAndCorruptRecords(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(filepath.Join(t.TempDir(), "c.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := l.Do(ctx, req(k, "x"), order(k, nil))
		require.NoError(t, err)
	}
	problems, err := db.Check(ctx, ledger.RecordKind)
	require.NoError(t, err)
	require.Empty(t, problems)

	require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
		idx := tx.Bucket([]byte(record.ReservedPrefix + "ledger.expiry"))
		c := idx.Cursor()
		k, _ := c.First()
		require.NoError(t, idx.Delete(k)) // record "a" loses its entry
		require.NoError(t, idx.Put(append(append([]byte(nil), k[:8]...), "acme|POST /v1/orders\x00ghost"...), nil))
		recs := tx.Bucket([]byte(record.ReservedPrefix + "ledger"))
		v := recs.Get([]byte("acme|POST /v1/orders\x00c"))
		bad := append([]byte(nil), v...)
		bad[10] ^= 0xff
		return recs.Put([]byte("acme|POST /v1/orders\x00c"), bad)
	}))
	problems, err = db.Check(ctx, ledger.RecordKind)
	require.NoError(t, err)
	var msgs []string
	for _, p := range problems {
		require.Equal(t, "idempotency", p.Check)
		msgs = append(msgs, p.Message)
	}
	require.Len(t, msgs, 3, "%v", msgs)
	require.Contains(t, msgs[0], `"acme|POST /v1/orders\x00a": no expiry-index entry`)
	require.Contains(t, msgs[1], "corrupt idempotency record")
	require.Contains(t, msgs[2], `"acme|POST /v1/orders\x00ghost": no such record`)

	// A corrupt record met on the request path is a clear error, not a panic
	// or a silent re-run.
	_, err = l.Do(ctx, req("c", "x"), order("c2", nil))
	require.ErrorIs(t, err, kv.ErrCorrupt)
	_, err = l.Get(ctx, "acme|POST /v1/orders", "c")
	require.ErrorIs(t, err, kv.ErrCorrupt)
	_, err = l.Claim(ctx, req("c", "x"))
	require.ErrorIs(t, err, kv.ErrCorrupt)
}

package conditional_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
	"github.com/oncekv/oncekv/seal/sealtest"
)

func sealedOrders(t *testing.T, db *kv.DB) *conditional.Table[Order] {
	t.Helper()
	tbl, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{Seal: true, Indexes: []conditional.Index[Order]{
		{Name: "by_ref", Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), o.ExternalRef != "" }},
	}})
	require.NoError(t, err)
	return tbl
}

// A sealed table: values round-trip through every read, stay out of the
// file, and the index keys work (they stay clear). Without the key the
// table cannot be sealed (ErrInvalidTable), rows do not open, and the check
// reports nothing it cannot verify; with a wrong key it reports every row.
func TestSealedTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	tbl := sealedOrders(t, db)
	for i := range 3 {
		_, err := tbl.Insert(ctx, fmt.Sprint("ord-", i), Order{Tenant: "acme", ExternalRef: fmt.Sprint("ref-", i), Amount: 4242_0 + i, Status: "secret-status"})
		require.NoError(t, err)
	}
	res, err := tbl.CompareAndSet(ctx, "ord-1", 1, Order{Tenant: "acme", ExternalRef: "ref-1", Amount: 7, Status: "secret-status"})
	require.NoError(t, err)
	require.True(t, res.Applied)
	row, err := tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ref-1"))
	require.NoError(t, err)
	require.Equal(t, 7, row.Value.Amount)
	require.Equal(t, uint64(2), row.Version)
	n := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0
		for r, err := range tbl.All(tx) {
			require.NoError(t, err)
			require.Equal(t, "secret-status", r.Value.Status)
			n++
		}
		require.Empty(t, tbl.Check(tx))
		return nil
	}))
	require.Equal(t, 3, n)
	problems, err := db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	require.Empty(t, problems)
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "secret-status")
	require.Contains(t, string(raw), "ref-1", "index keys stay clear")

	db, err = kv.Open(path, &kv.Options{ReadOnly: true})
	require.NoError(t, err)
	_, err = conditional.NewTable(db, "orders", &conditional.Options[Order]{Seal: true})
	require.ErrorIs(t, err, conditional.ErrInvalidTable)
	plain, err := conditional.NewTable[Order](db, "orders", nil)
	require.NoError(t, err)
	_, err = plain.Get(ctx, "ord-0")
	require.ErrorIs(t, err, seal.ErrUnknownKey)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		for _, err := range plain.All(tx) {
			require.ErrorIs(t, err, seal.ErrUnknownKey)
			require.ErrorContains(t, err, `"ord-`)
		}
		return nil
	}))
	problems, err = db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	require.Empty(t, problems, "without a key nothing is verified and nothing is called damaged")
	require.NoError(t, db.Close())

	wrong, err := seal.NewRing(seal.Key{ID: 1})
	require.NoError(t, err)
	db, err = kv.Open(path, &kv.Options{ReadOnly: true, Cipher: wrong})
	require.NoError(t, err)
	defer db.Close()
	problems, err = db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	require.Len(t, problems, 3)
	for _, p := range problems {
		require.Contains(t, p.Message, "sealed value does not open")
	}
}

// A sealed value copied onto another row fails to open there.
func TestSealedRowSwap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	ring := sealtest.Ring(t, 1)
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: ring})
	require.NoError(t, err)
	tbl := sealedOrders(t, db)
	_, err = tbl.Insert(ctx, "a", Order{Tenant: "acme", ExternalRef: "ra", Amount: 1})
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, "b", Order{Tenant: "acme", ExternalRef: "rb", Amount: 2})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	b, err := bolt.Open(path, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, b.Update(func(tx *bolt.Tx) error {
		rows := tx.Bucket([]byte("\x00oncekv/table/orders"))
		return rows.Put([]byte("b"), append([]byte(nil), rows.Get([]byte("a"))...))
	}))
	require.NoError(t, b.Close())
	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: ring})
	require.NoError(t, err)
	defer db.Close()
	tbl = sealedOrders(t, db)
	_, err = tbl.Get(ctx, "b")
	require.ErrorIs(t, err, seal.ErrTampered)
	got, err := tbl.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, got.Value.Amount)
}

// Reseal moves every sealed row, in every table, to the current key, in
// batches that resume where they stopped; rows of tables that did not opt
// in stay in clear.
func TestResealTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 1)})
	require.NoError(t, err)
	sealed := sealedOrders(t, db)
	other, err := conditional.NewTable(db, "archive", &conditional.Options[Order]{Seal: true})
	require.NoError(t, err)
	public, err := conditional.NewTable[Order](db, "public", nil)
	require.NoError(t, err)
	for i := range 5 {
		_, err := sealed.Insert(ctx, fmt.Sprint("o", i), Order{Tenant: "acme", ExternalRef: fmt.Sprint("r", i), Amount: i})
		require.NoError(t, err)
		_, err = other.Insert(ctx, fmt.Sprint("a", i), Order{Amount: 10 + i})
		require.NoError(t, err)
		_, err = public.Insert(ctx, fmt.Sprint("p", i), Order{Status: "public-status"})
		require.NoError(t, err)
	}
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2, 1)})
	require.NoError(t, err)
	total, batches := sealtest.Reseal(t, db, conditional.Reseal, 2)
	require.Equal(t, 10, total, "5 sealed rows in each of two tables")
	require.GreaterOrEqual(t, batches, 5+1)
	again, _ := sealtest.Reseal(t, db, conditional.Reseal, 100) // from an empty cursor, as every rekey test
	require.Zero(t, again, "nothing is left to move")
	require.NoError(t, db.Close())

	db, err = kv.Open(path, &kv.Options{NoSync: true, Cipher: sealtest.Ring(t, 2)})
	require.NoError(t, err)
	defer db.Close()
	problems, err := db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	require.Empty(t, problems)
	sealed = sealedOrders(t, db)
	got, err := sealed.Get(ctx, "o4")
	require.NoError(t, err)
	require.Equal(t, 4, got.Value.Amount)
	require.NoError(t, db.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 5, strings.Count(string(raw), "public-status"), "clear tables stay clear")
}

// Names and IDs at the edges of what is valid: letters, digits, '_', '-',
// '.', up to 128 bytes for names; IDs of 1 to MaxIDLen bytes.
func TestNamesAndIDsAtTheEdges(t *testing.T) {
	db := kvtestOpen(t)
	for _, ok := range []string{"a", "z", "A", "Z", "0", "9", "_", "-", ".", strings.Repeat("n", 128)} {
		_, err := conditional.NewTable[Order](db, ok, nil)
		require.NoError(t, err, "%q", ok)
	}
	for _, bad := range []string{"", "`", "{", "@", "[", "/", ":", " ", "é", strings.Repeat("n", 129)} {
		_, err := conditional.NewTable[Order](db, bad, nil)
		require.ErrorIs(t, err, conditional.ErrInvalidTable, "%q", bad)
	}
	tbl, err := conditional.NewTable[Order](db, "ids", nil)
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, strings.Repeat("i", conditional.MaxIDLen), Order{})
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, strings.Repeat("i", conditional.MaxIDLen+1), Order{})
	require.ErrorIs(t, err, conditional.ErrInvalidID)
}

// A compare-and-set that inserts (expected version 0) and hits a unique
// index reports neither applied nor found.
func TestCASInsertUniqueViolation(t *testing.T) {
	tbl, _ := setup(t)
	_, err := tbl.Insert(ctx, "a", Order{Tenant: "acme", ExternalRef: "r"})
	require.NoError(t, err)
	res, err := tbl.CompareAndSet(ctx, "b", 0, Order{Tenant: "acme", ExternalRef: "r"})
	var uv *conditional.UniqueViolationError
	require.ErrorAs(t, err, &uv)
	require.False(t, res.Applied)
	require.False(t, res.Found)
}

func kvtestOpen(t *testing.T) *kv.DB {
	t.Helper()
	db, err := kv.Open(filepath.Join(t.TempDir(), "n.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// An index key that cannot be stored (empty, or longer than bbolt takes)
// is refused by name before anything is written, in the managed forms and
// in a caller's transaction that goes on to commit: the row is not left
// stored without its index entry.
func TestIndexKeysThatCannotBeStoredAreRefused(t *testing.T) {
	db := kvtestOpen(t)
	tbl, err := conditional.NewTable(db, "raw", &conditional.Options[Order]{
		Indexes: []conditional.Index[Order]{{Name: "by_raw", Key: func(o Order) ([]byte, bool) { return []byte(o.ExternalRef), true }}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { checkTable(t, db, tbl) })

	longest := strings.Repeat("r", conditional.MaxIndexKeyLen)
	_, err = tbl.Insert(ctx, "longest", Order{ExternalRef: longest})
	require.NoError(t, err)
	got, err := tbl.GetByIndex(ctx, "by_raw", []byte(longest))
	require.NoError(t, err)
	require.Equal(t, "longest", got.ID)

	for _, ref := range []string{"", longest + "r"} {
		_, err = tbl.Insert(ctx, "a", Order{ExternalRef: ref})
		require.ErrorIs(t, err, conditional.ErrInvalidIndexKey, "%d bytes", len(ref))
		require.ErrorContains(t, err, `raw: index "by_raw" gives row "a" a key of`)
		_, err = tbl.Upsert(ctx, "by_raw", "a", Order{ExternalRef: ref}, nil)
		require.ErrorIs(t, err, conditional.ErrInvalidIndexKey)
		_, err = tbl.CompareAndSet(ctx, "longest", 1, Order{ExternalRef: ref})
		require.ErrorIs(t, err, conditional.ErrInvalidIndexKey)

		// A caller that goes on past the error commits nothing of the row.
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			_, err := tbl.InsertTx(tx, "b", Order{ExternalRef: ref})
			require.ErrorIs(t, err, conditional.ErrInvalidIndexKey)
			return nil
		}))
		for _, id := range []string{"a", "b"} {
			_, err = tbl.Get(ctx, id)
			require.ErrorIs(t, err, conditional.ErrNotFound, id)
		}
	}
	got, err = tbl.Get(ctx, "longest")
	require.NoError(t, err)
	require.Equal(t, uint64(1), got.Version, "the refused compare-and-set wrote nothing")
}

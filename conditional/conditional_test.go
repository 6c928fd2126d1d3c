package conditional_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/internal/record"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

var ctx = context.Background()

type Order struct {
	Tenant      string `json:"tenant"`
	ExternalRef string `json:"external_ref"`
	Amount      int    `json:"amount_cents"`
	Status      string `json:"status"`
	Coupon      string `json:"coupon,omitempty"`
}

func setup(t *testing.T) (*conditional.Table[Order], *kv.DB) {
	t.Helper()
	db := kvtest.Open(t, &kv.Options{NoSync: true}, conditional.Checker)
	tbl, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{
		Indexes: []conditional.Index[Order]{
			{Name: "by_ref", Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), o.ExternalRef != "" }},
			{Name: "by_coupon", Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Coupon), o.Coupon != "" }},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { checkTable(t, db, tbl) })
	return tbl, db
}

func checkTable(t *testing.T, db *kv.DB, tbl *conditional.Table[Order]) {
	t.Helper()
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Empty(t, tbl.Check(tx))
		return nil
	}))
}

func count(t *testing.T, db *kv.DB, tbl *conditional.Table[Order]) int {
	n := 0
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		n = 0 // a read run again (etcd) starts afresh
		for _, err := range tbl.All(tx) {
			require.NoError(t, err)
			n++
		}
		return nil
	}))
	return n
}

func TestNewTableValidation(t *testing.T) {
	t.Parallel()
	db := kvtest.Open(t, nil, conditional.Checker)
	key := func(Order) ([]byte, bool) { return nil, false }
	for name, opts := range map[string]*conditional.Options[Order]{
		"":           nil,
		"a/b":        nil,
		"has space":  nil,
		"ok-dup-idx": {Indexes: []conditional.Index[Order]{{Name: "x", Key: key}, {Name: "x", Key: key}}},
		"ok-nil-key": {Indexes: []conditional.Index[Order]{{Name: "x"}}},
		"ok-bad-idx": {Indexes: []conditional.Index[Order]{{Name: "x/y", Key: key}}},
	} {
		_, err := conditional.NewTable(db, name, opts)
		require.ErrorIs(t, err, conditional.ErrInvalidTable, name)
	}
}

func TestInsertAndUniqueViolation(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	r, err := tbl.Insert(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 2500, Status: "pending"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), r.Version)

	cases := []struct {
		name  string
		id    string
		order Order
		check func(error)
	}{
		{"same id", "o1", Order{Tenant: "acme", ExternalRef: "ext-9"}, func(err error) {
			var ee *conditional.ExistsError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, "o1", ee.ID)
			require.Equal(t, uint64(1), ee.Version)
		}},
		{"same business key", "o2", Order{Tenant: "acme", ExternalRef: "ext-1"}, func(err error) {
			var uv *conditional.UniqueViolationError
			require.ErrorAs(t, err, &uv)
			require.Equal(t, "by_ref", uv.Index)
			require.Equal(t, "o1", uv.ExistingID)
			require.Equal(t, "orders", uv.Table)
		}},
		{"empty id", "", Order{}, func(err error) { require.ErrorIs(t, err, conditional.ErrInvalidID) }},
	}
	for _, c := range cases {
		_, err := tbl.Insert(ctx, c.id, c.order)
		c.check(err)
	}
	// Another tenant may use the same external_ref.
	_, err = tbl.Insert(ctx, "o2", Order{Tenant: "globex", ExternalRef: "ext-1"})
	require.NoError(t, err)
	require.Equal(t, 2, count(t, db, tbl))
	got, err := tbl.GetByIndex(ctx, "by_ref", conditional.Key("globex", "ext-1"))
	require.NoError(t, err)
	require.Equal(t, "o2", got.ID)
	_, err = tbl.GetByIndex(ctx, "nope", nil)
	require.ErrorIs(t, err, conditional.ErrUnknownIndex)
	_, err = tbl.Get(ctx, "missing")
	require.ErrorIs(t, err, conditional.ErrNotFound)
}

func TestUpsertCollapsesDuplicates(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	o := Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 2500, Status: "pending"}
	res, err := tbl.Upsert(ctx, "by_ref", "o1", o, nil)
	require.NoError(t, err)
	require.True(t, res.Created)
	require.Equal(t, "o1", res.Row.ID)

	// A retry under a new ID collapses into the existing row, left as it is.
	o2 := o
	o2.Amount = 9999
	res, err = tbl.Upsert(ctx, "by_ref", "o1-retry", o2, nil)
	require.NoError(t, err)
	require.False(t, res.Created)
	require.False(t, res.Updated)
	require.Equal(t, "o1", res.Row.ID)
	require.Equal(t, 2500, res.Row.Value.Amount)
	require.Equal(t, uint64(1), res.Row.Version)

	// The caller may choose what an update changes.
	takeAmount := func(existing, incoming Order) (Order, bool) {
		existing.Amount = incoming.Amount
		return existing, true
	}
	res, err = tbl.Upsert(ctx, "by_ref", "o1-retry2", o2, takeAmount)
	require.NoError(t, err)
	require.True(t, res.Updated)
	require.Equal(t, uint64(2), res.Row.Version)
	require.Equal(t, 9999, res.Row.Value.Amount)
	// Updating to the same state writes nothing.
	res, err = tbl.Upsert(ctx, "by_ref", "o1-retry3", o2, takeAmount)
	require.NoError(t, err)
	require.False(t, res.Updated)
	require.Equal(t, uint64(2), res.Row.Version)

	require.Equal(t, 1, count(t, db, tbl))
	_, err = tbl.Upsert(ctx, "by_ref", "x", Order{Tenant: "acme"}, nil)
	require.ErrorIs(t, err, conditional.ErrNotIndexed)
	_, err = tbl.Upsert(ctx, "nope", "x", o, nil)
	require.ErrorIs(t, err, conditional.ErrUnknownIndex)
}

func TestCompareAndSet(t *testing.T) {
	t.Parallel()
	tbl, _ := setup(t)
	o := Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 100, Status: "pending"}

	res, err := tbl.CompareAndSet(ctx, "o1", 0, o) // 0: only if absent
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.Equal(t, uint64(1), res.Row.Version)

	res, err = tbl.CompareAndSet(ctx, "o1", 0, o)
	require.NoError(t, err)
	require.False(t, res.Applied, "expected-absent on an existing row")
	require.True(t, res.Found)

	o.Status = "paid"
	res, err = tbl.CompareAndSet(ctx, "o1", 1, o)
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.Equal(t, uint64(2), res.Row.Version)

	// A stale writer: nothing written, current state returned as a result.
	stale := o
	stale.Status = "cancelled"
	res, err = tbl.CompareAndSet(ctx, "o1", 1, stale)
	require.NoError(t, err)
	require.False(t, res.Applied)
	require.True(t, res.Found)
	require.Equal(t, uint64(2), res.Row.Version)
	require.Equal(t, "paid", res.Row.Value.Status)
	got, _ := tbl.Get(ctx, "o1")
	require.Equal(t, "paid", got.Value.Status)

	res, err = tbl.CompareAndSet(ctx, "missing", 3, o)
	require.NoError(t, err)
	require.False(t, res.Applied)
	require.False(t, res.Found)
}

func TestAssign(t *testing.T) {
	t.Parallel()
	tbl, _ := setup(t)
	_, err := tbl.Insert(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1", Status: "pending"})
	require.NoError(t, err)
	paid := func(o *Order) { o.Status = "paid" }

	for range 3 { // repeating an absolute assignment changes nothing after the first
		res, err := tbl.AssignField(ctx, "o1", paid, conditional.Cond{})
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.Equal(t, uint64(2), res.Row.Version)
		require.Equal(t, "paid", res.Row.Value.Status)
	}
	// With an expected version that moved on: left alone, current returned.
	res, err := tbl.AssignField(ctx, "o1", func(o *Order) { o.Status = "refunded" }, conditional.Cond{IfVersion: 1})
	require.NoError(t, err)
	require.False(t, res.Applied)
	require.Equal(t, "paid", res.Row.Value.Status)
	// Whole-value assignment at the right version.
	res, err = tbl.Assign(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1", Status: "refunded"}, conditional.Cond{IfVersion: 2})
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.Equal(t, uint64(3), res.Row.Version)
	_, err = tbl.Assign(ctx, "missing", Order{}, conditional.Cond{})
	require.ErrorIs(t, err, conditional.ErrNotFound)
}

// AssignTx in the caller's transaction: it sees the transaction's own
// writes, a rollback leaves the row and its index as they were, and a
// commit applies the assignment with the caller's other writes. The
// table's Name and DB are what it was made with.
func TestAssignTxInTheCallersTransaction(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	require.Equal(t, "orders", tbl.Name())
	require.Same(t, db, tbl.DB())
	_, err := tbl.Insert(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1", Status: "pending"})
	require.NoError(t, err)
	refunded := Order{Tenant: "acme", ExternalRef: "ext-2", Status: "refunded"}

	errAbort := fmt.Errorf("abort")
	err = db.Update(ctx, func(tx kv.Tx) error {
		res, err := tbl.AssignTx(tx, "o1", refunded, conditional.Cond{IfVersion: 1})
		require.NoError(t, err)
		require.True(t, res.Applied)
		row, err := tbl.GetTx(tx, "o1")
		require.NoError(t, err)
		require.Equal(t, refunded, row.Value, "the transaction sees its own assignment")
		return errAbort
	})
	require.ErrorIs(t, err, errAbort)
	row, err := tbl.Get(ctx, "o1")
	require.NoError(t, err)
	require.Equal(t, uint64(1), row.Version, "rolled back")
	require.Equal(t, "pending", row.Value.Status)
	_, err = tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-2"))
	require.ErrorIs(t, err, conditional.ErrNotFound, "and its index entry with it")

	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("audit"))
		if err != nil {
			return err
		}
		if err := b.Put([]byte("o1"), []byte("refunded")); err != nil {
			return err
		}
		res, err := tbl.AssignTx(tx, "o1", refunded, conditional.Cond{})
		require.True(t, res.Applied)
		return err
	}))
	got, err := tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-2"))
	require.NoError(t, err)
	require.Equal(t, conditional.Row[Order]{ID: "o1", Version: 2, Value: refunded}, got)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Equal(t, "refunded", string(tx.Bucket([]byte("audit")).Get([]byte("o1"))))
		return nil
	}))
}

func TestIndexMovesOnUpdateAndDeleteRemovesEntries(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	_, err := tbl.Insert(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1", Coupon: "SAVE10"})
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, "o2", Order{Tenant: "acme", ExternalRef: "ext-2"})
	require.NoError(t, err)

	// Move o1's business key: the old key is freed, the new one taken.
	res, err := tbl.AssignField(ctx, "o1", func(o *Order) { o.ExternalRef = "ext-1b"; o.Coupon = "" }, conditional.Cond{})
	require.NoError(t, err)
	require.True(t, res.Applied)
	_, err = tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-1"))
	require.ErrorIs(t, err, conditional.ErrNotFound)
	got, err := tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-1b"))
	require.NoError(t, err)
	require.Equal(t, "o1", got.ID)
	_, err = tbl.GetByIndex(ctx, "by_coupon", conditional.Key("SAVE10"))
	require.ErrorIs(t, err, conditional.ErrNotFound, "a field that became empty leaves the index")
	_, err = tbl.Insert(ctx, "o3", Order{Tenant: "acme", ExternalRef: "ext-1"})
	require.NoError(t, err, "the freed key is usable")

	// Moving onto a taken key is a violation, and nothing changes.
	_, err = tbl.AssignField(ctx, "o1", func(o *Order) { o.ExternalRef = "ext-2" }, conditional.Cond{})
	var uv *conditional.UniqueViolationError
	require.ErrorAs(t, err, &uv)
	require.Equal(t, "o2", uv.ExistingID)
	got, _ = tbl.Get(ctx, "o1")
	require.Equal(t, "ext-1b", got.Value.ExternalRef)

	// Delete: stale version is refused; then removed with its entries.
	res, err = tbl.Delete(ctx, "o2", conditional.Cond{IfVersion: 9})
	require.NoError(t, err)
	require.False(t, res.Applied)
	res, err = tbl.Delete(ctx, "o2", conditional.Cond{IfVersion: 1})
	require.NoError(t, err)
	require.True(t, res.Applied)
	_, err = tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-2"))
	require.ErrorIs(t, err, conditional.ErrNotFound)
	res, err = tbl.Delete(ctx, "o2", conditional.Cond{})
	require.NoError(t, err)
	require.False(t, res.Found)
	require.Equal(t, 2, count(t, db, tbl))
}

func TestModifyIsABoundedCASLoop(t *testing.T) {
	t.Parallel()
	tbl, _ := setup(t)
	_, err := tbl.Insert(ctx, "c", Order{Amount: 0})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				_, err := tbl.Modify(ctx, "c", func(o Order) (Order, error) { o.Amount += 10; return o, nil }, 1000)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	got, _ := tbl.Get(ctx, "c")
	require.Equal(t, 800, got.Value.Amount)
	require.Equal(t, uint64(81), got.Version)
	_, err = tbl.Modify(ctx, "missing", func(o Order) (Order, error) { return o, nil }, 0)
	require.ErrorIs(t, err, conditional.ErrNotFound)
}

// 32 goroutines upserting the same business identifier produce one row.
func TestConcurrentUpsertsProduceOneRow(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	var wg sync.WaitGroup
	ids := make([]string, 32)
	created := make([]bool, 32)
	for i := range 32 {
		wg.Go(func() {
			res, err := tbl.Upsert(ctx, "by_ref", fmt.Sprint("id-", i), Order{Tenant: "acme", ExternalRef: "ext-1", Amount: i}, nil)
			require.NoError(t, err)
			ids[i], created[i] = res.Row.ID, res.Created
		})
	}
	wg.Wait()
	require.Equal(t, 1, count(t, db, tbl))
	n := 0
	for i := range 32 {
		require.Equal(t, ids[0], ids[i], "everyone sees the same row")
		if created[i] {
			n++
		}
	}
	require.Equal(t, 1, n)
}

// 32 goroutines doing CAS on one counter from the same read: exactly one
// winner per version.
func TestConcurrentCASOneWinnerPerVersion(t *testing.T) {
	t.Parallel()
	tbl, _ := setup(t)
	_, err := tbl.Insert(ctx, "counter", Order{Amount: 0})
	require.NoError(t, err)
	for round := range 5 {
		cur, err := tbl.Get(ctx, "counter")
		require.NoError(t, err)
		var wg sync.WaitGroup
		wins := make(chan int, 32)
		for i := range 32 {
			wg.Go(func() {
				res, err := tbl.CompareAndSet(ctx, "counter", cur.Version, Order{Amount: cur.Value.Amount + 1, Status: fmt.Sprint(i)})
				require.NoError(t, err)
				if res.Applied {
					wins <- i
				} else {
					require.Equal(t, cur.Version+1, res.Row.Version, "losers see the winner's version")
				}
			})
		}
		wg.Wait()
		close(wins)
		require.Len(t, wins, 1, "round %d", round)
		got, _ := tbl.Get(ctx, "counter")
		require.Equal(t, cur.Version+1, got.Version)
		require.Equal(t, round+1, got.Value.Amount)
	}
}

// The generic checker (kv.DB.Check, later `oncekv check`) finds index
// entries that do not match their rows without knowing the value type.
func TestCheckFindsBrokenIndex(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(t.TempDir()+"/c.db", &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	tbl, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{Indexes: []conditional.Index[Order]{
		{Name: "by_ref", Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true }},
	}})
	require.NoError(t, err)
	_, err = tbl.Insert(ctx, "o1", Order{Tenant: "acme", ExternalRef: "ext-1"})
	require.NoError(t, err)
	problems, err := db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	require.Empty(t, problems)

	require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
		ib := btx.Bucket([]byte(record.ReservedPrefix + "table/orders/idx/by_ref"))
		require.NoError(t, ib.Put(conditional.Key("acme", "ext-1"), []byte("o-ghost")))
		return ib.Put([]byte("dangling"), []byte("o-missing"))
	}))
	problems, err = db.Check(ctx, conditional.Checker)
	require.NoError(t, err)
	var msgs []string
	for _, p := range problems {
		msgs = append(msgs, p.Check+": "+p.Message)
	}
	require.Len(t, msgs, 3, "%v", msgs)
	require.Contains(t, msgs[0], `conditional: orders: row "o1": index "by_ref" entry for key`)
	require.Contains(t, msgs[0], `points to "o-ghost"`)
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Len(t, tbl.Check(tx), 3)
		return nil
	}))
}

// A damaged index entry (a bit flipped in the row ID it holds) once made
// GetByIndex return another row for the key, and Upsert update it: the row
// found is now checked against the index, and a mismatch, or a row that
// does not exist, is an error wrapping kv.ErrCorrupt.
func TestGetByIndexChecksTheRowFound(t *testing.T) {
	t.Parallel()
	db, err := kv.Open(t.TempDir()+"/c.db", &kv.Options{NoSync: true}) // bbolt: the damage is written with it
	require.NoError(t, err)
	defer db.Close()
	tbl, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{Indexes: []conditional.Index[Order]{
		{Name: "by_ref", Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true }},
	}})
	require.NoError(t, err)
	for i, ref := range []string{"ext-1", "ext-2"} {
		_, err := tbl.Insert(ctx, fmt.Sprintf("o%d", i+1), Order{Tenant: "acme", ExternalRef: ref})
		require.NoError(t, err)
	}
	set := func(id string) {
		require.NoError(t, db.Bolt().Update(func(btx *bolt.Tx) error {
			ib := btx.Bucket([]byte(record.ReservedPrefix + "table/orders/idx/by_ref"))
			return ib.Put(conditional.Key("acme", "ext-1"), []byte(id))
		}))
	}
	set("o2") // o1 -> o2: one bit
	_, err = tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-1"))
	require.ErrorIs(t, err, kv.ErrCorrupt)
	require.ErrorContains(t, err, `row "o2"`)
	// An upsert through the same entry changes nothing: not o2.
	_, err = tbl.Upsert(ctx, "by_ref", "o9", Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 5}, func(cur, in Order) (Order, bool) {
		cur.Amount = in.Amount
		return cur, true
	})
	require.ErrorIs(t, err, kv.ErrCorrupt)
	o2, err := tbl.Get(ctx, "o2")
	require.NoError(t, err)
	require.Zero(t, o2.Value.Amount, "o2 was not updated")
	set("o3")
	_, err = tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-1"))
	require.ErrorIs(t, err, kv.ErrCorrupt)
	_, err = tbl.Upsert(ctx, "by_ref", "o9", Order{Tenant: "acme", ExternalRef: "ext-1"}, nil)
	require.ErrorIs(t, err, kv.ErrCorrupt)
	set("o1") // repaired
	r, err := tbl.GetByIndex(ctx, "by_ref", conditional.Key("acme", "ext-1"))
	require.NoError(t, err)
	require.Equal(t, "o1", r.ID)
	checkTable(t, db, tbl)
}

// Rows inserted by concurrent callers share group-commit batches; each row
// keeps its own value (regression for a reused encode buffer).
func TestBatchedRowsKeepTheirOwnValues(t *testing.T) {
	t.Parallel()
	tbl, _ := setup(t)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				_, err := tbl.Insert(ctx, fmt.Sprintf("o-%d-%d", g, i), Order{Tenant: "t", ExternalRef: fmt.Sprintf("r-%d-%d", g, i), Amount: g*100 + i})
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	for g := range 16 {
		for i := range 20 {
			r, err := tbl.Get(ctx, fmt.Sprintf("o-%d-%d", g, i))
			require.NoError(t, err)
			require.Equal(t, g*100+i, r.Value.Amount)
		}
	}
}

// Range reads the rows of [from, to) alone, in ID order, and stops when
// its caller does.
func TestRangeReadsItsRowsAlone(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	for _, id := range []string{"a/1", "a/2", "ab/1", "b/1"} {
		_, err := tbl.Insert(ctx, id, Order{Tenant: "t", Amount: 1})
		require.NoError(t, err)
	}
	ids := func(from, to string, most int) []string {
		var out []string
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			out = out[:0] // a read run again (etcd) starts afresh
			for r, err := range tbl.Range(tx, from, to) {
				require.NoError(t, err)
				out = append(out, r.ID)
				if len(out) == most {
					break
				}
			}
			return nil
		}))
		return out
	}
	require.Equal(t, []string{"a/1", "a/2"}, ids("a/", string(kv.PrefixEnd([]byte("a/"))), 0))
	require.Equal(t, []string{"a/1", "a/2", "ab/1", "b/1"}, ids("", "", 0))
	require.Equal(t, []string{"ab/1", "b/1"}, ids("ab", "", 0))
	require.Equal(t, []string{"a/1", "a/2", "ab/1"}, ids("", "b", 0))
	require.Empty(t, ids("b", "a", 0))
	require.Empty(t, ids("c", "", 0))
	require.Equal(t, []string{"a/1"}, ids("a/", "b", 1))
}

// Serializable group limits through Range: concurrent transactions each
// count one customer's orders and insert one more while there are fewer
// than five, four customers at once. Every customer ends with exactly
// five (an insert into a range another transaction read refuses that
// transaction's commit on etcd; bbolt runs them one at a time).
func TestRangeCountedLimitsHold(t *testing.T) {
	t.Parallel()
	tbl, db := setup(t)
	const customers, workers, each, limit = 4, 3, 3, 5
	var wg sync.WaitGroup
	for c := range customers {
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					prefix := fmt.Sprintf("c%d/", c)
					err := db.Update(ctx, func(tx kv.Tx) error {
						n := 0
						for _, err := range tbl.Range(tx, prefix, string(kv.PrefixEnd([]byte(prefix)))) {
							if err != nil {
								return err
							}
							n++
						}
						if n >= limit {
							return nil
						}
						_, err := tbl.InsertTx(tx, fmt.Sprintf("%s%d-%d", prefix, w, i), Order{Tenant: prefix, Amount: n})
						return err
					})
					assert.NoError(t, err) // not require: this is not the test's goroutine
				}
			})
		}
	}
	wg.Wait()
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		per := map[string]int{}
		for r, err := range tbl.All(tx) {
			require.NoError(t, err)
			per[r.ID[:3]]++
		}
		for c := range customers {
			require.Equal(t, limit, per[fmt.Sprintf("c%d/", c)], "customer %d", c)
		}
		return nil
	}))
}

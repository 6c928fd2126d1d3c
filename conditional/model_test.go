package conditional_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/kv"
)

type modelRow struct {
	version uint64
	value   Order
}

// model is the in-memory reference: a map of rows and the unique-index
// rules written out the simplest way.
type model map[string]modelRow

// holder returns the first index (in declaration order) where another row
// already holds o's key, and that row.
func (m model) holder(id string, o Order) (string, string) {
	for oid, r := range m {
		if oid != id && o.ExternalRef != "" && r.value.ExternalRef != "" && r.value.Tenant == o.Tenant && r.value.ExternalRef == o.ExternalRef {
			return "by_ref", oid
		}
	}
	for oid, r := range m {
		if oid != id && o.Coupon != "" && r.value.Coupon == o.Coupon {
			return "by_coupon", oid
		}
	}
	return "", ""
}

func (m model) byRef(o Order) (string, bool) {
	for id, r := range m {
		if r.value.ExternalRef != "" && r.value.Tenant == o.Tenant && r.value.ExternalRef == o.ExternalRef {
			return id, true
		}
	}
	return "", false
}

// TestModel runs random inserts, upserts, CAS, assignments and deletes on a
// few rows and checks the table against the model after every step. Set
// ONCEKV_SEED to replay a failing run.
func TestModel(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ONCEKV_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (ONCEKV_SEED=%d to reproduce)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	tbl, db := setup(t)
	m := model{}

	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	randOrder := func() Order {
		return Order{Tenant: pick("a", "b"), ExternalRef: pick("", "r0", "r1", "r2"), Amount: rng.IntN(5), Status: pick("pending", "paid"), Coupon: pick("", "", "c0", "c1")}
	}
	ids := []string{"o0", "o1", "o2", "o3", "o4"}

	for step := range 2000 {
		id := pick(ids...)
		o := randOrder()
		var op string
		switch rng.IntN(5) {
		case 0:
			op = fmt.Sprintf("insert %s %+v", id, o)
			_, err := tbl.Insert(ctx, id, o)
			if _, ok := m[id]; ok {
				require.ErrorIs(t, err, conditional.ErrExists, op)
			} else if idx, holder := m.holder(id, o); holder != "" {
				var uv *conditional.UniqueViolationError
				require.ErrorAs(t, err, &uv, op)
				require.Equal(t, idx, uv.Index, op)
				require.Equal(t, holder, uv.ExistingID, op)
			} else {
				require.NoError(t, err, op)
				m[id] = modelRow{1, o}
			}
		case 1:
			if o.ExternalRef == "" {
				o.ExternalRef = "r0"
			}
			update := rng.IntN(2) == 0
			op = fmt.Sprintf("upsert %s %+v update=%t", id, o, update)
			var fn conditional.UpdateFunc[Order]
			if update {
				fn = func(e, in Order) (Order, bool) { e.Amount = in.Amount; return e, e.Amount != in.Amount || true }
			}
			res, err := tbl.Upsert(ctx, "by_ref", id, o, fn)
			if existing, ok := m.byRef(o); ok {
				cur := m[existing]
				if !update || cur.value.Amount == o.Amount {
					require.NoError(t, err, op)
					require.Equal(t, existing, res.Row.ID, op)
					require.False(t, res.Created || res.Updated, op)
					break
				}
				nv := cur.value
				nv.Amount = o.Amount
				require.NoError(t, err, op)
				require.True(t, res.Updated, op)
				m[existing] = modelRow{cur.version + 1, nv}
			} else if _, taken := m[id]; taken {
				require.ErrorIs(t, err, conditional.ErrExists, op)
			} else if idx, holder := m.holder(id, o); holder != "" {
				var uv *conditional.UniqueViolationError
				require.ErrorAs(t, err, &uv, op)
				require.Equal(t, idx, uv.Index, op)
			} else {
				require.NoError(t, err, op)
				require.True(t, res.Created, op)
				m[id] = modelRow{1, o}
			}
		case 2:
			cur, exists := m[id]
			expected := uint64(rng.IntN(3))
			if exists && rng.IntN(2) == 0 {
				expected = cur.version
			}
			op = fmt.Sprintf("cas %s expected=%d %+v", id, expected, o)
			res, err := tbl.CompareAndSet(ctx, id, expected, o)
			switch {
			case !exists && expected != 0:
				require.NoError(t, err, op)
				require.False(t, res.Applied || res.Found, op)
			case exists && cur.version != expected:
				require.NoError(t, err, op)
				require.False(t, res.Applied, op)
				require.Equal(t, cur.version, res.Row.Version, op)
			default:
				if idx, holder := m.holder(id, o); holder != "" {
					var uv *conditional.UniqueViolationError
					require.ErrorAs(t, err, &uv, op)
					require.Equal(t, idx, uv.Index, op)
					break
				}
				require.NoError(t, err, op)
				require.True(t, res.Applied, op)
				m[id] = modelRow{cur.version + 1, o}
			}
		case 3:
			status := pick("pending", "paid", "refunded")
			ref := pick("", "r0", "r1", "r2")
			var cond conditional.Cond
			if rng.IntN(2) == 0 {
				cond.IfVersion = uint64(1 + rng.IntN(3))
			}
			op = fmt.Sprintf("assign %s status=%s ref=%s %+v", id, status, ref, cond)
			res, err := tbl.AssignField(ctx, id, func(o *Order) { o.Status, o.ExternalRef = status, ref }, cond)
			cur, exists := m[id]
			if !exists {
				require.ErrorIs(t, err, conditional.ErrNotFound, op)
				break
			}
			if cond.IfVersion != 0 && cond.IfVersion != cur.version {
				require.NoError(t, err, op)
				require.False(t, res.Applied, op)
				break
			}
			nv := cur.value
			nv.Status, nv.ExternalRef = status, ref
			if idx, holder := m.holder(id, nv); holder != "" {
				var uv *conditional.UniqueViolationError
				require.ErrorAs(t, err, &uv, op)
				require.Equal(t, idx, uv.Index, op)
				break
			}
			require.NoError(t, err, op)
			require.True(t, res.Applied, op)
			if nv != cur.value {
				m[id] = modelRow{cur.version + 1, nv}
			}
		case 4:
			var cond conditional.Cond
			if rng.IntN(2) == 0 {
				cond.IfVersion = uint64(1 + rng.IntN(3))
			}
			op = fmt.Sprintf("delete %s %+v", id, cond)
			res, err := tbl.Delete(ctx, id, cond)
			require.NoError(t, err, op)
			cur, exists := m[id]
			if exists && (cond.IfVersion == 0 || cond.IfVersion == cur.version) {
				require.True(t, res.Applied, op)
				delete(m, id)
			} else {
				require.False(t, res.Applied, op)
			}
		}
		// Compare the whole table with the model after every step.
		got := model{}
		require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
			for r, err := range tbl.All(tx) {
				require.NoError(t, err)
				got[r.ID] = modelRow{r.Version, r.Value}
			}
			return nil
		}))
		require.Equal(t, m, got, "step %d after %s (seed %d)", step, op, seed)
		if step%100 == 0 {
			checkTable(t, db, tbl)
		}
	}
}

package bench

import (
	"testing"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/kv"
)

type order struct {
	Tenant      string `json:"tenant"`
	ExternalRef string `json:"external_ref"`
	Amount      int    `json:"amount_cents"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
}

func orderTable(b *testing.B, db *kv.DB) *conditional.Table[order] {
	t, err := conditional.NewTable(db, "orders", &conditional.Options[order]{Indexes: []conditional.Index[order]{{
		Name: "by_ref",
		Key:  func(o order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true },
	}}})
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkCAS compares a compare-and-set of an existing row (read, version
// check, encode, write) with a bare bbolt Put of the same bytes, each in its
// own Update, on tables of the same size (NoSync).
func BenchmarkCAS(b *testing.B) {
	const rows = 10000
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	tbl := orderTable(b, db)
	versions := make([]uint64, rows)
	for i := range rows {
		o := order{Tenant: "acme", ExternalRef: string(key("ext", i)), Amount: 2500, Currency: "eur", Status: "pending"}
		if _, err := tbl.Insert(ctx, string(key("ord", i)), o); err != nil {
			b.Fatal(err)
		}
		versions[i] = 1
		bareWrite(b, bare, key("ord", i))
	}
	var p pair
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		n := i % rows
		k := key("ord", n)
		o := order{Tenant: "acme", ExternalRef: string(key("ext", n)), Amount: 2500 + i, Currency: "eur", Status: "paid"}
		p.timeBare(func() { bareWrite(b, bare, k) })
		p.timeSubject(func() {
			err := db.Update(ctx, func(tx kv.Tx) error {
				res, err := tbl.CompareAndSetTx(tx, string(k), versions[n], o)
				if err == nil && !res.Applied {
					b.Fatal("CAS not applied")
				}
				versions[n] = res.Row.Version
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b)
}

// BenchmarkUpsert compares creating a row through the unique index (look-up,
// insert, index entry) with a bare Put of the same row.
func BenchmarkUpsert(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	tbl := orderTable(b, db)
	writePairs(b, bare, func(i int, k []byte) error {
		o := order{Tenant: "acme", ExternalRef: string(key("ext", i)), Amount: 2500, Currency: "eur", Status: "pending"}
		return db.Update(ctx, func(tx kv.Tx) error {
			_, err := tbl.UpsertTx(tx, "by_ref", string(k), o, nil)
			return err
		})
	})
}

package conditional_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/conditional"
	"github.com/oncekv/oncekv/kv"
)

func exampleTable() (*conditional.Table[Order], func()) {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	orders, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{
		Indexes: []conditional.Index[Order]{{
			Name: "by_ref", // UNIQUE (tenant, external_ref)
			Key:  func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true },
		}},
	})
	if err != nil {
		panic(err)
	}
	return orders, func() { db.Close(); os.RemoveAll(dir) }
}

// Versioned update, the SQL
//
//	UPDATE orders SET status = 'paid', version = version + 1
//	WHERE id = $1 AND version = $2
//
// A writer holding a stale version changes nothing and reads back the
// current row.
func ExampleTable_CompareAndSet() {
	orders, done := exampleTable()
	defer done()
	ctx := context.Background()
	row, _ := orders.Insert(ctx, "ord_1", Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 2500, Status: "pending"})

	paid := row.Value
	paid.Status = "paid"
	res, _ := orders.CompareAndSet(ctx, "ord_1", row.Version, paid)
	fmt.Println("first writer applied:", res.Applied, "version", res.Row.Version)

	cancelled := row.Value
	cancelled.Status = "cancelled"
	res, _ = orders.CompareAndSet(ctx, "ord_1", row.Version, cancelled) // same stale read
	fmt.Println("stale writer applied:", res.Applied, "current:", res.Row.Value.Status, "version", res.Row.Version)
	// Output:
	// first writer applied: true version 2
	// stale writer applied: false current: paid version 2
}

// A customer's orders, under IDs that begin with the customer's, read
// alone, the SQL
//
//	SELECT * FROM orders WHERE id >= 'acme/' AND id < 'acme0' ORDER BY id
//
// On etcd a write transaction that reads them so is refused only by a
// change to them, not by other customers' new orders.
func ExampleTable_Range() {
	orders, done := exampleTable()
	defer done()
	ctx := context.Background()
	for i, id := range []string{"acme/ord_1", "acme/ord_2", "acmex/ord_1", "globex/ord_1"} {
		if _, err := orders.Insert(ctx, id, Order{Tenant: "t", ExternalRef: fmt.Sprint(i), Amount: 1000 * (i + 1)}); err != nil {
			panic(err)
		}
	}
	var got []string
	err := orders.DB().View(ctx, func(tx kv.Tx) error {
		got = got[:0] // a read may run again: its last run counts
		for row, err := range orders.Range(tx, "acme/", string(kv.PrefixEnd([]byte("acme/")))) {
			if err != nil {
				return err
			}
			got = append(got, fmt.Sprintf("%s %d", row.ID, row.Value.Amount))
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	for _, g := range got {
		fmt.Println(g)
	}
	// Output:
	// acme/ord_1 1000
	// acme/ord_2 2000
}

// Upsert on a business identifier, the SQL
//
//	INSERT INTO orders (id, tenant, external_ref, ...) VALUES (...)
//	ON CONFLICT (tenant, external_ref) DO NOTHING RETURNING *
//
// A retried create, even under a fresh ID, returns the first order.
func ExampleTable_Upsert() {
	orders, done := exampleTable()
	defer done()
	ctx := context.Background()
	o := Order{Tenant: "acme", ExternalRef: "ext-1", Amount: 2500, Status: "pending"}

	first, _ := orders.Upsert(ctx, "by_ref", "ord_1", o, nil)
	retry, _ := orders.Upsert(ctx, "by_ref", "ord_2", o, nil)
	fmt.Println("first:", first.Row.ID, "created:", first.Created)
	fmt.Println("retry:", retry.Row.ID, "created:", retry.Created)

	_, err := orders.Insert(ctx, "ord_3", o) // a plain insert reports the conflict
	fmt.Println(err)
	// Output:
	// first: ord_1 created: true
	// retry: ord_1 created: false
	// conditional: orders: unique index "by_ref" already maps key "\x04acme\x05ext-1" to row "ord_1"
}

// Absolute assignment, the SQL
//
//	UPDATE orders SET status = 'paid' WHERE id = $1
//
// Setting a target state (not "add 10") is safe to repeat: the second run
// finds the row already paid and changes nothing.
func ExampleTable_AssignField() {
	orders, done := exampleTable()
	defer done()
	ctx := context.Background()
	_, _ = orders.Insert(ctx, "ord_1", Order{Tenant: "acme", ExternalRef: "ext-1", Status: "pending"})

	for range 2 {
		res, _ := orders.AssignField(ctx, "ord_1", func(o *Order) { o.Status = "paid" }, conditional.Cond{})
		fmt.Println(res.Row.Value.Status, "version", res.Row.Version)
	}
	// Output:
	// paid version 2
	// paid version 2
}

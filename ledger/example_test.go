package ledger_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// The single-transaction path: the order, the idempotency record and the
// stored response commit together. The retry is answered from the record.
func ExampleLedger_Do() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()
	l, _ := ledger.New(db, nil)

	fpr, _ := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts"}})
	scope, _ := ledger.Scope("acme", "POST", "/v1/orders")
	createOrder := func(body string) {
		fp, _ := fpr.Sum("POST", "/v1/orders", "application/json", []byte(body))
		res, err := l.Do(context.Background(), ledger.Request{Scope: scope, Key: "order-key-1", Fingerprint: fp},
			func(tx kv.Tx) (ledger.Response, error) {
				orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
				if err != nil {
					return ledger.Response{}, err
				}
				if err := orders.Put([]byte("ord_1"), []byte(body)); err != nil {
					return ledger.Response{}, err
				}
				return ledger.Response{Status: 201, Body: []byte(`{"id":"ord_1"}`)}, nil
			})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("status=%d replayed=%t body=%s\n", res.Response.Status, res.Replayed, res.Response.Body)
	}

	createOrder(`{"amount_cents":2500,"client_ts":"10:00:00"}`)
	createOrder(`{"client_ts":"10:00:05","amount_cents":2500}`) // a retry, re-serialised
	createOrder(`{"amount_cents":9999}`)                        // the same key for another request
	// Output:
	// status=201 replayed=false body={"id":"ord_1"}
	// status=201 replayed=true body={"id":"ord_1"}
	// error: ledger: idempotency key "order-key-1" in scope "acme|POST /v1/orders" was first used with request 2de9e2e7c25a, this request is 1b43d1c10a50
}

// The two-phase path: the claim commits before the outside call, the
// completion commits the result with the business writes, fenced by the
// claim's version.
func ExampleLedger_Claim() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, _ := kv.Open(filepath.Join(dir, "app.db"), nil)
	defer db.Close()
	l, _ := ledger.New(db, nil)
	ctx := context.Background()
	req := ledger.Request{Scope: "acme|POST /v1/orders/{id}/pay", Key: "pay-1", Fingerprint: ledger.Fingerprint{1}}

	out, err := l.Claim(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed version", out.Claim.Version)

	chargeID := "ch_123" // the provider call happens here, outside any transaction

	res, err := l.Complete(ctx, out.Claim, ledger.Response{Status: 200, Body: []byte(chargeID)}, func(tx kv.Tx) error {
		orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return orders.Put([]byte("ord_1"), []byte("paid"))
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("completed: %s\n", res.Response.Body)

	again, _ := l.Claim(ctx, req)
	fmt.Printf("retry replayed: %s\n", again.Replay.Response.Body)
	// Output:
	// claimed version 1
	// completed: ch_123
	// retry replayed: ch_123
}

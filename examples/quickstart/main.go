package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

func main() {
	dbPath := flag.String("db", "", "database file (default: a temporary file, removed on exit)")
	flag.Parse()
	if *dbPath == "" {
		dir, err := os.MkdirTemp("", "oncekv-quickstart")
		if err != nil {
			log.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		*dbPath = filepath.Join(dir, "quickstart.db")
	}
	if err := run(context.Background(), *dbPath); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, path string) error {
	clock := kvtest.NewManualClock(time.Now().UTC())
	db, err := kv.Open(path, &kv.Options{Clock: clock})
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	l, err := ledger.New(db, &ledger.Config{Lease: 10 * time.Second})
	if err != nil {
		return err
	}
	fpr, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts"}})
	if err != nil {
		return err
	}

	fmt.Println("== single-transaction path: POST /v1/orders, sent three times ==")
	scope, _ := ledger.Scope("acme", "POST", "/v1/orders")
	bodies := []string{
		`{"external_ref":"ext-1","amount_cents":2500,"client_ts":"10:00:00"}`,
		`{"amount_cents":2500,"external_ref":"ext-1","client_ts":"10:00:03"}`, // a retry, re-serialised
		`{"external_ref":"ext-1","amount_cents":9900}`,                        // a bug: same key, other request
	}
	for i, body := range bodies {
		fp, err := fpr.Sum("POST", "/v1/orders", "application/json", []byte(body))
		if err != nil {
			return err
		}
		res, err := l.Do(ctx, ledger.Request{Scope: scope, Key: "create-ext-1", Fingerprint: fp}, func(tx kv.Tx) (ledger.Response, error) {
			orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return ledger.Response{}, err
			}
			return ledger.Response{Status: 201, Body: []byte(`{"id":"ord_1","status":"pending"}`)}, orders.Put([]byte("ord_1"), []byte(body))
		})
		switch {
		case err != nil:
			fmt.Printf("attempt %d: rejected: %v\n", i+1, err)
		default:
			fmt.Printf("attempt %d: %d %s (replayed=%t)\n", i+1, res.Response.Status, res.Response.Body, res.Replayed)
		}
	}

	fmt.Println("\n== two-phase path: POST /v1/orders/ord_1/pay, the worker stalls after the provider call ==")
	payScope, _ := ledger.Scope("acme", "POST", "/v1/orders/{id}/pay")
	req := ledger.Request{Scope: payScope, Key: "pay-ord-1", Fingerprint: ledger.Fingerprint{1}}
	first, err := l.Claim(ctx, req)
	if err != nil {
		return err
	}
	fmt.Printf("worker A claimed the key: version %d, lease until +10s\n", first.Claim.Version)

	_, err = l.Claim(ctx, req)
	fmt.Printf("a retry during the lease: %v\n", err)

	clock.Advance(11 * time.Second)
	second, err := l.Claim(ctx, req)
	if err != nil {
		return err
	}
	fmt.Printf("a retry after the lease: takes over, version %d (takeover=%t): ask the provider before charging again\n",
		second.Claim.Version, second.Claim.Takeover)

	_, err = l.Complete(ctx, first.Claim, ledger.Response{Status: 200, Body: []byte(`{"status":"paid"}`)}, nil)
	fmt.Printf("worker A wakes up and completes: %v\n", err)

	res, err := l.Complete(ctx, second.Claim, ledger.Response{Status: 200, Body: []byte(`{"status":"paid"}`)}, func(tx kv.Tx) error {
		orders, _ := tx.CreateBucketIfNotExists([]byte("orders"))
		return orders.Put([]byte("ord_1/status"), []byte("paid"))
	})
	if err != nil {
		return err
	}
	fmt.Printf("worker B completes: %d %s\n", res.Response.Status, res.Response.Body)
	again, err := l.Claim(ctx, req)
	if err != nil {
		return err
	}
	fmt.Printf("a late retry is replayed: %d %s\n", again.Replay.Response.Status, again.Replay.Response.Body)

	problems, err := db.Check(ctx, ledger.RecordKind)
	if err != nil {
		return err
	}
	fmt.Printf("\nconsistency check: %d problems\n", len(problems))
	return nil
}

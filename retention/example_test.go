package retention_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/retention"
)

// A policy keeps one tenant's idempotency records three days and the rest
// one; the ledger stamps each record's expiry as it writes it, and a sweep
// removes what is past it. A retry after that runs again.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	// A clock the example moves by hand; a service keeps the wall clock,
	// the default.
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	db, err := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	pol := retention.Policy{
		Idempotency: 24 * time.Hour,
		Overrides:   []retention.Override{{Kind: retention.Idempotency, ScopePrefix: "acme|", Retention: 72 * time.Hour}},
	}
	if err := pol.Validate(retention.Constraints{Lease: 30 * time.Second, ClientRetryHorizon: time.Hour}); err != nil {
		panic(err)
	}
	l, err := ledger.New(db, &ledger.Config{RetentionFor: pol.Func(retention.Idempotency)})
	if err != nil {
		panic(err)
	}
	pay := func(tenant string) string {
		scope, _ := ledger.Scope(tenant, "POST", "/v1/payments")
		res, err := l.Do(ctx, ledger.Request{Scope: scope, Key: "pay-1", Fingerprint: ledger.Fingerprint{1}},
			func(tx kv.Tx) (ledger.Response, error) {
				// The business write: one payment more for the tenant.
				b, err := tx.CreateBucketIfNotExists([]byte("payments"))
				if err != nil {
					return ledger.Response{}, err
				}
				n := len(b.Get([]byte(tenant)))
				return ledger.Response{Status: 201}, b.Put([]byte(tenant), make([]byte, n+1))
			})
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("replayed=%t", res.Replayed)
	}
	fmt.Println("acme:", pay("acme"), "globex:", pay("globex"))

	clock.Advance(48 * time.Hour)
	st, err := retention.Sweep(ctx, db, nil, ledger.RecordKind)
	if err != nil {
		panic(err)
	}
	fmt.Println("after two days, swept:", st.Deleted())
	fmt.Println("acme:", pay("acme"), "globex:", pay("globex"))
	var acme, globex int
	_ = db.View(ctx, func(tx kv.Tx) error {
		b := tx.Bucket([]byte("payments"))
		acme, globex = len(b.Get([]byte("acme"))), len(b.Get([]byte("globex")))
		return nil
	})
	fmt.Println("payments: acme", acme, "globex", globex)

	// A policy that would let a late retry run twice is refused.
	short := retention.Policy{Idempotency: 10 * time.Minute}
	fmt.Println(short.Validate(retention.Constraints{ClientRetryHorizon: time.Hour}))
	// Output:
	// acme: replayed=false globex: replayed=false
	// after two days, swept: 1
	// acme: replayed=true globex: replayed=false
	// payments: acme 1 globex 2
	// retention: invalid policy: idempotency retention 10m0s is shorter than the client retry horizon 1h0m0s: a retry arriving after the record is gone would run again
}

// Run sweeps on an interval until its context ends; onSweep sees each
// sweep's figures (export them as metrics). Here the first sweep ends it.
func ExampleRun() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), nil)
	if err != nil {
		panic(err)
	}
	defer db.Close()

	ctx, stop := context.WithCancel(context.Background())
	err = retention.Run(ctx, db, &retention.Config{BatchSize: 500}, 10*time.Millisecond, func(st retention.Stats, err error) {
		fmt.Println("swept:", st.Deleted(), "error:", err)
		stop()
	}, ledger.RecordKind)
	fmt.Println(err)
	// Output:
	// swept: 0 error: <nil>
	// context canceled
}

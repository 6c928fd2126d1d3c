package sideeffect_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/sideeffect"
	"github.com/oncekv/oncekv/sideeffect/providertest"
)

// Perform wires an idempotent request to a provider call. The first
// response is lost after the provider charged; the client waits the
// Retry-After it was given (the intent's backoff) and retries, and the retry
// asks the provider instead of charging again.
func ExampleExecutor_Perform() {
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	db, _ := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{Clock: clock})
	defer db.Close()

	provider := providertest.New(providertest.Rates{}, 1)
	lost := false
	provider.Script = func(op string, _ sideeffect.Call) providertest.Fault {
		if op == "do" && !lost {
			lost = true
			return providertest.LoseResponse
		}
		return providertest.None
	}
	x, _ := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{
		"charge": {
			Provider: provider,
			OnSucceeded: func(tx kv.Tx, in *sideeffect.Intent) error {
				orders, err := tx.CreateBucketIfNotExists([]byte("orders"))
				if err != nil {
					return err
				}
				return orders.Put([]byte(in.Subject), []byte("paid"))
			},
		},
	}})
	l, _ := ledger.New(db, nil)

	req := ledger.Request{Scope: "acme|POST /v1/orders/{id}/pay", Key: "pay-1042", Fingerprint: ledger.Fingerprint{1}}
	spec := sideeffect.Spec{Kind: "charge", Subject: "order/1042", Scope: req.Scope, Key: req.Key, Purpose: "charge"}
	respond := func(_ kv.Tx, in *sideeffect.Intent) (ledger.Response, error) {
		return ledger.Response{Status: 200, Body: in.Result}, nil
	}
	ctx := context.Background()
	for attempt := 1; attempt <= 3; attempt++ {
		res, err := x.Perform(ctx, l, req, spec, respond)
		var pending *sideeffect.PendingError
		if errors.As(err, &pending) {
			fmt.Printf("attempt %d: %v\n", attempt, err)
			clock.Advance(pending.RetryAfter) // the client honours Retry-After
			continue
		}
		fmt.Printf("attempt %d: %d %s replayed=%t\n", attempt, res.Response.Status, res.Response.Body, res.Replayed)
	}
	fmt.Println("charges:", len(provider.Charges()), "calls:", provider.Ops(sideeffect.DownstreamKey(spec.Scope, spec.Key, spec.Purpose)))
	// Output:
	// attempt 1: sideeffect: intent f727e77e-77db-5acf-a89d-8902ac7f0df8 (charge order/1042) is unknown after 1 attempts: providertest: connection reset (the charge went through)
	// attempt 2: 200 ch_0001 replayed=false
	// attempt 3: 200 ch_0001 replayed=true
	// charges: 1 calls: [do:lost status:succeeded]
}

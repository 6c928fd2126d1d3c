package bench

import (
	"context"
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/sideeffect"
)

// BenchmarkIntentCreate compares the business write plus its intent record
// (downstream key, due index) in one transaction with the bare business
// write (NoSync).
func BenchmarkIntentCreate(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare, db := openDB(b, "bare", opts), openDB(b, "oncekv", opts)
	nop := sideeffect.ProviderFunc{DoFunc: func(context.Context, sideeffect.Call) (sideeffect.Report, error) { return sideeffect.Report{}, nil }}
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: nop}}})
	if err != nil {
		b.Fatal(err)
	}
	writePairs(b, bare, func(_ int, k []byte) error {
		return db.Update(ctx, func(tx kv.Tx) error {
			if err := putOrder(tx, k); err != nil {
				return err
			}
			_, _, err := x.CreateTx(tx, sideeffect.Spec{Kind: "charge", Subject: "order/" + string(k), Scope: "acme", Key: string(k), Purpose: "charge", Payload: orderValue})
			return err
		})
	})
}

package bench

import (
	"context"
	"net/http"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

var ctx = context.Background()

func putOrder(tx kv.Tx, k []byte) error {
	b := tx.Bucket([]byte("orders"))
	if b == nil {
		var err error
		if b, err = tx.CreateBucketIfNotExists([]byte("orders")); err != nil {
			return err
		}
	}
	return b.Put(k, orderValue)
}

var respHeader = http.Header{"Content-Type": {"application/json"}}

// BenchmarkSingleTx compares the single-transaction idempotent write
// (ledger.Do: look-up, business write, record, expiry index, one commit)
// with a bare bbolt Update doing the same business write. NoSync isolates
// the CPU cost from the disk.
func BenchmarkSingleTx(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	bare := openDB(b, "bare", opts)
	db := openDB(b, "oncekv", opts)
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	var p pair
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := key("ord", i)
		p.timeBare(func() {
			if err := bare.Bolt().Update(func(btx *bolt.Tx) error { return putOrder(kv.WrapTx(btx), k) }); err != nil {
				b.Fatal(err)
			}
		})
		p.timeSubject(func() {
			req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i)}}
			_, err := l.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Header: respHeader, Body: responseBody}, putOrder(tx, k)
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b)
}

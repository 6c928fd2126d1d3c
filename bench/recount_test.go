package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// BenchmarkRecountUsage measures ledger.RecountUsage (oncekv recount): one
// transaction that reads every record and mends nothing here, at 100k
// live records (and 1M with ONCEKV_BENCH_BIG=1). It holds bbolt's writer
// that long.
func BenchmarkRecountUsage(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("ONCEKV_BENCH_BIG") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			db, l := openLedger(b, filepath.Join(b.TempDir(), "recount.db"))
			b.Cleanup(func() { _ = db.Close() })
			resp := ledger.Response{Status: 201, Header: respHeader, Body: responseBody}
			if err := fill(ctx, db, n, func(tx kv.Tx, i int) error {
				_, err := l.DoTx(ctx, tx, ledger.Request{Scope: fmt.Sprintf("tenant-%d|POST /v1/orders", i%100), Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{1}},
					func(kv.Tx) (ledger.Response, error) { return resp, nil })
				return err
			}); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				mended, err := ledger.RecountUsage(ctx, db)
				if err != nil || len(mended) != 0 {
					b.Fatalf("recount: %v, %d mended", err, len(mended))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/record")
		})
	}
}

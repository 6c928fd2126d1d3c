package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// BenchmarkOpen measures what opening a database costs the ledger: the
// rebuild of the in-memory key directory from the record log, at 100k live
// records (and 1M with ONCEKV_BENCH_BIG=1). Each iteration closes and
// reopens the file. The directory's heap per record is measured in
// internal/recstore (BenchmarkDirectoryHeap).
func BenchmarkOpen(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("ONCEKV_BENCH_BIG") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "open.db")
			db, err := kv.Open(path, &kv.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			l, err := ledger.New(db, nil)
			if err != nil {
				b.Fatal(err)
			}
			resp := ledger.Response{Status: 201, Header: respHeader, Body: responseBody}
			if err := fill(ctx, db, n, func(tx kv.Tx, i int) error {
				_, err := l.DoTx(ctx, tx, ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{1}},
					func(kv.Tx) (ledger.Response, error) { return resp, nil })
				return err
			}); err != nil {
				b.Fatal(err)
			}
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
			var rebuild time.Duration
			b.ResetTimer()
			for b.Loop() {
				db, err := kv.Open(path, &kv.Options{NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				l, err := ledger.New(db, nil)
				if err != nil {
					b.Fatal(err)
				}
				st := l.Stats()
				if st.Rebuilt != n {
					b.Fatalf("rebuilt %d records, want %d", st.Rebuilt, n)
				}
				rebuild += st.RebuildTime
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rebuild.Milliseconds())/float64(b.N), "rebuild-ms")
		})
	}
}

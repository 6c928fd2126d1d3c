package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
)

// BenchmarkOpen measures what opening a database costs the ledger: the
// rebuild of the in-memory key directory from the record log, at 100k live
// records (and 1M with ONCEKV_BENCH_BIG=1). Each iteration closes and
// reopens the file. after=close opens a file closed cleanly (bbolt's
// freelist written at close, kv.Options.SyncFreelist); after=crash opens
// one whose process died without closing it (no freelist in the file:
// kv.Open walks the file to refuse a damaged one, then bbolt walks it to
// find the free pages). The directory's heap per record is measured in
// internal/recstore (BenchmarkDirectoryHeap).
func BenchmarkOpen(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("ONCEKV_BENCH_BIG") != "" {
		sizes = append(sizes, 1_000_000)
	}
	for _, n := range sizes {
		path := filepath.Join(b.TempDir(), "open.db")
		db, l := openLedger(b, path)
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
		for _, crashed := range []bool{false, true} {
			name := fmt.Sprintf("records=%d/after=close", n)
			if crashed {
				name = fmt.Sprintf("records=%d/after=crash", n)
			}
			b.Run(name, func(b *testing.B) {
				var rebuild time.Duration
				for range b.N {
					if crashed {
						b.StopTimer()
						kvtest.DropFreelist(b, path)
						b.StartTimer()
					}
					db, l := openLedger(b, path)
					st := l.Stats()
					if st.Rebuilt != n {
						b.Fatalf("rebuilt %d records, want %d", st.Rebuilt, n)
					}
					rebuild += st.RebuildTime
					b.StopTimer() // Close writes the freelist: not part of an open
					if err := db.Close(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(rebuild.Milliseconds())/float64(b.N), "rebuild-ms")
			})
		}
	}
}

// openLedger opens the file at path (NoSync) and a ledger on it.
func openLedger(b *testing.B, path string) (*kv.DB, *ledger.Ledger) {
	db, err := kv.Open(path, &kv.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	return db, l
}

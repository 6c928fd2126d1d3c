package bench

import (
	"net/http"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
)

// The floor benchmarks measure, in raw bbolt with no oncekv code, the least
// any design that keeps an idempotency record durable in bbolt can cost,
// against the same bare side as the benchmark they stand under. Their
// ratio is the floor under that benchmark's goal: oncekv's own cost is the
// distance between the two.

// recordSize is the size of the log entry oncekv stores for the requests
// of BenchmarkSingleTx.
func recordSize(b *testing.B) int {
	req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", 1)), Fingerprint: ledger.Fingerprint{1}}
	n, err := storedEntrySize(ctx, openDB(b, "size", &kv.Options{NoSync: true}), req, ledger.Response{Status: 201, Header: respHeader, Body: responseBody})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkFloorSingleTx is the floor under BenchmarkSingleTx: the bare
// business write plus one Put of a record-sized value laid out as the
// ledger lays out its records (floorRecord: a one-page tail bucket moved
// to a log a page at a time), in one Update. No look-up, no encoding, no
// directory: what bbolt charges for the record's pages.
func BenchmarkFloorSingleTx(b *testing.B) {
	floorWrites(b, floorRecord(recordSize(b)))
}

// floorWrites times the bare write against the bare write plus record in
// one Update, and reports the pages the subject writes per transaction.
func floorWrites(b *testing.B, record func(kv.Tx) error) {
	opts := &kv.Options{NoSync: true}
	bare, floor := openDB(b, "bare", opts), openDB(b, "floor", opts)
	bare0, floor0 := pagesWritten(bare), pagesWritten(floor)
	writePairs(b, bare, func(_ int, k []byte) error {
		return floor.Bolt().Update(func(btx *bolt.Tx) error {
			tx := kv.WrapTx(btx)
			if err := putOrder(tx, k); err != nil {
				return err
			}
			return record(tx)
		})
	})
	b.ReportMetric(float64(pagesWritten(bare)-bare0)/float64(b.N), "bare-pages/op")
	b.ReportMetric(float64(pagesWritten(floor)-floor0)/float64(b.N), "pages/op")
}

// BenchmarkFloorReplay is the floor under BenchmarkReplayHit: the bare
// read, except that what it returns is owned by the caller as a replay's
// is (the body copied into its own slice, the headers into a fresh
// http.Header), with nothing checked or decoded.
func BenchmarkFloorReplay(b *testing.B) {
	const n = 10000
	bare := openDB(b, "bare", &kv.Options{NoSync: true})
	db := openDB(b, "oncekv", &kv.Options{NoSync: true})
	l, err := ledger.New(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	fillReplays(b, l, bare, n)
	var p pair
	var sink []byte
	var resp ledger.Response
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := key("idem", i%n)
		p.timeBare(func() { sink = bareRead(bare, k, sink) })
		p.timeSubject(func() {
			_ = bare.Bolt().View(func(tx *bolt.Tx) error {
				v := tx.Bucket([]byte("responses")).Get(k)
				resp = ledger.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: append([]byte(nil), v...)}
				return nil
			})
		})
	}
	_, _ = sink, resp
	p.report(b)
}

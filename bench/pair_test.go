package bench

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
)

// pair times two operations interleaved, op by op, and reports each side's
// mean and their ratio. The standard ns/op covers both sides together.
type pair struct {
	bare, subject time.Duration
}

func (p *pair) timeBare(fn func())    { s := time.Now(); fn(); p.bare += time.Since(s) }
func (p *pair) timeSubject(fn func()) { s := time.Now(); fn(); p.subject += time.Since(s) }

// writePairs times, write by write, the bare business write of order i
// (under key("ord", i)) against subject doing the same through oncekv,
// and reports both. What runs before it is not timed.
func writePairs(b *testing.B, bare *kv.DB, subject func(i int, k []byte) error) {
	var p pair
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		k := key("ord", i)
		p.timeBare(func() { bareWrite(b, bare, k) })
		p.timeSubject(func() {
			if err := subject(i, k); err != nil {
				b.Fatal(err)
			}
		})
	}
	p.report(b)
}

func (p *pair) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64(p.bare.Nanoseconds())/n, "bare-ns/op")
	b.ReportMetric(float64(p.subject.Nanoseconds())/n, "oncekv-ns/op")
	if p.bare > 0 {
		b.ReportMetric(float64(p.subject)/float64(p.bare), "ratio")
	}
}

func openDB(b *testing.B, name string, opts *kv.Options) *kv.DB {
	b.Helper()
	db, err := kv.Open(filepath.Join(b.TempDir(), name+".db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	return db
}

// key returns a well-spread key, so writes land all over the tree as real
// keys (UUIDs, order IDs) do.
func key(prefix string, i int) []byte {
	return fmt.Appendf(nil, "%s-%016x", prefix, uint64(i)*0x9E3779B97F4A7C15)
}

var orderValue = []byte(`{"id":"ord_000000000000","external_ref":"ext-00000000","amount_cents":2500,"currency":"eur","status":"pending","version":1,"customer":"cus_0000000000","created_at":"2026-12-01T10:00:00Z"}`)

var responseBody = []byte(`{"id":"ord_000000000000","status":"pending","amount_cents":2500,"currency":"eur","version":1}`)

// bareWrite is the baseline of most pairs: one bbolt Update that stores the
// order under k.
func bareWrite(b *testing.B, db *kv.DB, k []byte) {
	if err := db.Bolt().Update(func(tx *bolt.Tx) error { return putOrder(kv.WrapTx(tx), k) }); err != nil {
		b.Fatal(err)
	}
}

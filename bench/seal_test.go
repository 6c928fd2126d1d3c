package bench

import (
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/seal"
)

// BenchmarkEncryption compares ledger.Do on a database without a key ring
// ("bare" side) with the same call on one whose stored responses are
// sealed (the "oncekv" side: kv.Options.Cipher, AES-256-GCM), interleaved,
// NoSync: the ratio is the CPU cost of sealing, which fsync hides in a
// durable run (oncekv bench --encrypted). /replay times answering a retry,
// which opens the sealed response.
func BenchmarkEncryption(b *testing.B) {
	k1, _ := seal.NewKey(1)
	ring, err := seal.NewRing(k1)
	if err != nil {
		b.Fatal(err)
	}
	plain, err := ledger.New(openDB(b, "plain", &kv.Options{NoSync: true}), nil)
	if err != nil {
		b.Fatal(err)
	}
	sealed, err := ledger.New(openDB(b, "sealed", &kv.Options{NoSync: true, Cipher: ring}), nil)
	if err != nil {
		b.Fatal(err)
	}
	do := func(l *ledger.Ledger, i int) {
		k := key("ord", i)
		req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i)}}
		res, err := l.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: respHeader, Body: responseBody}, putOrder(tx, k)
		})
		if err != nil || len(res.Response.Body) != len(responseBody) {
			b.Fatal(err)
		}
	}
	next := 0 // keys stay new across the runs of the sub-benchmark
	b.Run("write", func(b *testing.B) {
		var p pair
		b.ReportAllocs()
		for b.Loop() {
			i := next
			next++
			if i%2 == 0 {
				p.timeBare(func() { do(plain, i) })
				p.timeSubject(func() { do(sealed, i) })
			} else {
				p.timeSubject(func() { do(sealed, i) })
				p.timeBare(func() { do(plain, i) })
			}
		}
		p.report(b)
	})
	b.Run("replay", func(b *testing.B) {
		const n = 1000
		for i := range n { // stored once; every later Do replays
			do(plain, -1-i)
			do(sealed, -1-i)
		}
		var p pair
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := -1 - i%n
			p.timeBare(func() { do(plain, j) })
			p.timeSubject(func() { do(sealed, j) })
		}
		p.report(b)
	})
}

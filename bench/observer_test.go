package bench

import (
	"context"
	"testing"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
)

// noopObserver listens to everything and does nothing: the cost of the
// reporting itself (events built, functions called, spans asked for).
func noopObserver() *observe.Observer {
	return &observe.Observer{
		Request:      func(context.Context, observe.Request) {},
		Commit:       func(observe.Commit) {},
		Sweep:        func(observe.Sweep) {},
		Intent:       func(context.Context, observe.Intent) {},
		ProviderCall: func(context.Context, observe.ProviderCall) {},
		Publish:      func(context.Context, observe.Publish) {},
		OutboxLag:    func(observe.OutboxLag) {},
		Message:      func(context.Context, observe.Message) {},
		Span: func(ctx context.Context, _ string, _ ...observe.Attr) (context.Context, func(error)) {
			return ctx, func(error) {}
		},
	}
}

// BenchmarkObserver compares ledger.Do with no observer ("bare" side)
// against the same call with an observer that listens to everything and
// does nothing (the "oncekv" side), interleaved, NoSync: the ratio is what
// the reporting costs. The unset side is SingleTx's subject: compare its
// ns/op with BenchmarkSingleTx's oncekv-ns/op in the same run.
func BenchmarkObserver(b *testing.B) {
	opts := &kv.Options{NoSync: true}
	unset, err := ledger.New(openDB(b, "unset", opts), nil)
	if err != nil {
		b.Fatal(err)
	}
	set, err := ledger.New(openDB(b, "observed", &kv.Options{NoSync: true, Observer: noopObserver()}), nil)
	if err != nil {
		b.Fatal(err)
	}
	do := func(l *ledger.Ledger, i int) {
		k := key("ord", i)
		req := ledger.Request{Scope: "acme|POST /v1/orders", Key: string(key("idem", i)), Fingerprint: ledger.Fingerprint{byte(i)}}
		_, err := l.Do(ctx, req, func(tx kv.Tx) (ledger.Response, error) {
			return ledger.Response{Status: 201, Header: respHeader, Body: responseBody}, putOrder(tx, k)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var p pair
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // alternate which goes first: the second runs on a warmer cache
			p.timeBare(func() { do(unset, i) })
			p.timeSubject(func() { do(set, i) })
		} else {
			p.timeSubject(func() { do(set, i) })
			p.timeBare(func() { do(unset, i) })
		}
	}
	p.report(b)
}

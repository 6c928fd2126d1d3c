package oncekvotel_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	oncekvotel "github.com/oncekv/oncekv/otel"
)

// BenchmarkOTel is the cost of the OpenTelemetry observer per idempotent
// request: ledger.Do with no observer against the same call reporting to
// the real SDK (metrics into a manual reader; with traces, spans sampled
// and ended into a tracer provider without exporter), interleaved, NoSync,
// alternating which runs first. Ratio = observed / unobserved.
func BenchmarkOTel(b *testing.B) {
	for _, traces := range []bool{false, true} {
		b.Run(fmt.Sprintf("traces=%t", traces), func(b *testing.B) {
			ctx := context.Background()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer func() { _ = mp.Shutdown(ctx) }()
			opts := &oncekvotel.Options{MeterProvider: mp}
			if traces {
				tp := sdktrace.NewTracerProvider()
				defer func() { _ = tp.Shutdown(ctx) }()
				opts.TracerProvider = tp
			}
			obs, err := oncekvotel.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			open := func(name string, o *kv.Options) *ledger.Ledger {
				db, err := kv.Open(filepath.Join(b.TempDir(), name+".db"), o)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = db.Close() })
				l, err := ledger.New(db, nil)
				if err != nil {
					b.Fatal(err)
				}
				return l
			}
			plain := open("plain", &kv.Options{NoSync: true})
			observed := open("observed", &kv.Options{NoSync: true, Observer: obs})
			body := []byte(`{"id":"ord_000000000000","status":"pending","amount_cents":2500,"currency":"eur","version":1}`)
			do := func(l *ledger.Ledger, i int) time.Duration {
				start := time.Now()
				_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: fmt.Sprintf("idem-%016x", uint64(i)*0x9E3779B97F4A7C15), Fingerprint: ledger.Fingerprint{1}},
					func(tx kv.Tx) (ledger.Response, error) {
						bk, err := tx.CreateBucketIfNotExists([]byte("orders"))
						if err != nil {
							return ledger.Response{}, err
						}
						return ledger.Response{Status: 201, Body: body}, bk.Put(fmt.Appendf(nil, "ord-%016x", uint64(i)*0x9E3779B97F4A7C15), body)
					})
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			var base, subject time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					base += do(plain, i)
					subject += do(observed, i)
				} else {
					subject += do(observed, i)
					base += do(plain, i)
				}
			}
			b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "plain-ns/op")
			b.ReportMetric(float64(subject.Nanoseconds())/float64(b.N), "otel-ns/op")
			b.ReportMetric(float64(subject)/float64(base), "ratio")
		})
	}
}

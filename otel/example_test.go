package oncekvotel_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	oncekvotel "github.com/oncekv/oncekv/otel"
)

// The observer New returns goes in kv.Options.Observer: every package on
// that database then reports to the providers. Here the SDK's manual
// reader and an in-memory exporter stand in for a service's exporters
// (OTLP, Prometheus).
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) }()

	obs, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "oncekv-example")
	defer os.RemoveAll(dir)
	db, err := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{Observer: obs})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	l, _ := ledger.New(db, nil)

	scope, _ := ledger.Scope("acme", "POST", "/v1/orders")
	for _, key := range []string{"k1", "k1", "k2"} { // k1's second send is a retry
		_, _ = l.Do(ctx, ledger.Request{Scope: scope, Key: key, Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "oncekv.request.outcomes" {
				var lines []string
				for _, p := range sum.DataPoints {
					outcome, _ := p.Attributes.Value("oncekv.outcome")
					lines = append(lines, fmt.Sprintf("%s outcome=%s: %d", m.Name, outcome.AsString(), p.Value))
				}
				slices.Sort(lines)
				for _, line := range lines {
					fmt.Println(line)
				}
			}
		}
	}
	fmt.Println("spans:", len(spans.GetSpans()), spans.GetSpans()[0].Name)
	// Output:
	// oncekv.request.outcomes outcome=new: 2
	// oncekv.request.outcomes outcome=replay: 1
	// spans: 3 oncekv.ledger.do
}

package oncekvotel_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	oncekvotel "github.com/oncekv/oncekv/otel"
	"github.com/oncekv/oncekv/outbox"
	"github.com/oncekv/oncekv/sideeffect"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// spanProvider records the span context its calls run under, and fails
// before charging: the intent parks after one attempt.
type spanProvider struct{ parents []trace.SpanContext }

func (p *spanProvider) Do(ctx context.Context, _ sideeffect.Call) (sideeffect.Report, error) {
	p.parents = append(p.parents, trace.SpanContextFromContext(ctx))
	return sideeffect.Report{}, context.DeadlineExceeded
}

func (p *spanProvider) Status(ctx context.Context, _ sideeffect.Call) (sideeffect.Report, error) {
	p.parents = append(p.parents, trace.SpanContextFromContext(ctx))
	return sideeffect.Report{State: sideeffect.NotFound}, nil
}

// A scripted scenario through the real SDK: 3 new requests, 2 replays, 1
// mismatch, one intent parked. The metrics and spans say exactly that, and
// the provider's call runs inside the provider span.
func TestScenario(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = mp.Shutdown(ctx); _ = tp.Shutdown(ctx) }()
	obs, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp, TracerProvider: tp, TenantAttribute: true})
	require.NoError(t, err)
	db := kvtest.Open(t, &kv.Options{Observer: obs})

	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	do := func(key string, fp byte) error {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{fp}},
			func(kv.Tx) (ledger.Response, error) {
				return ledger.Response{Status: 201, Body: []byte(`{"id":"x"}`)}, nil
			})
		return err
	}
	for _, k := range []string{"a", "b", "c"} {
		require.NoError(t, do(k, 1))
	}
	require.NoError(t, do("a", 1))
	require.NoError(t, do("b", 1))
	require.ErrorIs(t, do("c", 2), ledger.ErrMismatch)

	prov := &spanProvider{}
	x, err := sideeffect.New(db, &sideeffect.Config{Handlers: map[string]sideeffect.Handler{"charge": {Provider: prov}}, MaxAttempts: 1})
	require.NoError(t, err)
	in, _, err := x.Create(ctx, sideeffect.Spec{Kind: "charge", Subject: "order/1", Scope: "acme", Key: "1", Purpose: "charge"})
	require.NoError(t, err)
	_, err = x.Execute(ctx, in.ID)
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := sums(rm)
	require.Equal(t, int64(3), got["oncekv.request.outcomes|oncekv.call=do,oncekv.outcome=new,oncekv.tenant=acme"])
	require.Equal(t, int64(2), got["oncekv.request.outcomes|oncekv.call=do,oncekv.outcome=replay,oncekv.tenant=acme"])
	require.Equal(t, int64(1), got["oncekv.request.outcomes|oncekv.call=do,oncekv.outcome=mismatch,oncekv.tenant=acme"])
	require.Equal(t, int64(1), got["oncekv.intent.transitions|oncekv.intent.kind=charge,oncekv.intent.state=pending"])
	require.Equal(t, int64(1), got["oncekv.intent.transitions|oncekv.intent.kind=charge,oncekv.intent.state=needs_attention"])
	require.Equal(t, int64(1), got["oncekv.provider.calls|oncekv.intent.kind=charge,oncekv.outcome=error,oncekv.provider.op=do"])
	counts := histCounts(rm)
	require.Equal(t, uint64(3), counts["oncekv.record.size|oncekv.call=do"], "three records stored")
	require.Equal(t, uint64(6), counts["oncekv.request.duration|oncekv.call=do,oncekv.outcome=new"]+counts["oncekv.request.duration|oncekv.call=do,oncekv.outcome=replay"]+counts["oncekv.request.duration|oncekv.call=do,oncekv.outcome=mismatch"])
	require.Positive(t, counts["oncekv.commit.duration|error=false"])
	require.Positive(t, counts["oncekv.commit.write.duration|"])

	names := map[string]int{}
	var providerSpan sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		names[s.Name()]++
		if s.Name() == "oncekv.provider.do" {
			providerSpan = s
		}
	}
	require.Equal(t, map[string]int{"oncekv.ledger.do": 6, "oncekv.provider.do": 1}, names)
	require.Len(t, prov.parents, 1)
	require.Equal(t, providerSpan.SpanContext().SpanID(), prov.parents[0].SpanID(), "the provider ran inside the provider span")
	attrs := map[string]string{}
	for _, a := range providerSpan.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	require.Equal(t, in.DownstreamKey, attrs["oncekv.downstream_key"])
	require.NotContains(t, attrs, "oncekv.payload")
	require.Equal(t, "Error", providerSpan.Status().Code.String())
}

func sums(rm metricdata.ResourceMetrics) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					out[m.Name+"|"+attrString(dp.Attributes.ToSlice())] += dp.Value
				}
			}
		}
	}
	return out
}

func histCounts(rm metricdata.ResourceMetrics) map[string]uint64 {
	out := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch h := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range h.DataPoints {
					out[m.Name+"|"+attrString(dp.Attributes.ToSlice())] += dp.Count
				}
			case metricdata.Histogram[int64]:
				for _, dp := range h.DataPoints {
					out[m.Name+"|"+attrString(dp.Attributes.ToSlice())] += dp.Count
				}
			}
		}
	}
	return out
}

// attrString renders attributes (sorted by the SDK) as k=v,k=v.
func attrString(kvs []attribute.KeyValue) string {
	parts := make([]string, len(kvs))
	for i, kv := range kvs {
		parts[i] = string(kv.Key) + "=" + kv.Value.String()
	}
	return strings.Join(parts, ",")
}

// The outbox gauges after a relay pass through the real SDK: a damaged
// pending event is counted apart (oncekv.outbox.damaged), and the events
// around it are published (pending 0).
func TestOutboxGauges(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	obs, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp})
	require.NoError(t, err)
	db, err := kv.Open(filepath.Join(t.TempDir(), "o.db"), &kv.Options{NoSync: true, Observer: obs})
	require.NoError(t, err)
	defer db.Close()
	o := outbox.New(db)
	for _, id := range []string{"a", "b", "c"} {
		_, _, err := o.Add(ctx, outbox.Event{ID: id, Topic: "t"})
		require.NoError(t, err)
	}
	require.NoError(t, db.Bolt().Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("\x00oncekv/outbox"))
		k, v := b.Cursor().Last()
		return b.Put(bytes.Clone(k), v[:len(v)-2])
	}))
	r, err := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: outbox.PublishFunc(func(context.Context, outbox.Event) error { return nil })})
	require.NoError(t, err)
	st, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Published)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && len(g.DataPoints) > 0 {
				got[m.Name] = g.DataPoints[len(g.DataPoints)-1].Value
			}
		}
	}
	require.Equal(t, map[string]int64{"oncekv.outbox.pending": 0, "oncekv.outbox.quarantined": 0, "oncekv.outbox.damaged": 1}, got)
}

// ObserveLedger reports the ledger's Stats at each collection: the
// directory's records and heap, its rebuild time, and the cache of recent
// records with its hits and misses; with the cache off every look-up is a
// miss. After Unregister the instruments report nothing.
func TestObserveLedger(t *testing.T) {
	ctx := context.Background()
	for _, off := range []bool{false, true} {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		opts := &kv.Options{NoSync: true}
		if off {
			opts.RecentCacheBytes = -1
		}
		db, err := kv.Open(filepath.Join(t.TempDir(), "l.db"), opts)
		require.NoError(t, err)
		l, err := ledger.New(db, nil)
		require.NoError(t, err)
		reg, err := oncekvotel.ObserveLedger(l, &oncekvotel.Options{MeterProvider: mp})
		require.NoError(t, err)
		do := func(key string) {
			_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: key, Fingerprint: ledger.Fingerprint{1}},
				func(kv.Tx) (ledger.Response, error) {
					return ledger.Response{Status: 201, Body: []byte(`{"id":"x"}`)}, nil
				})
			require.NoError(t, err)
		}
		for _, k := range []string{"a", "b", "c", "a", "b"} { // three new, two replays
			do(k)
		}
		collect := func() (map[string]int64, map[string]int64, map[string]float64) {
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(ctx, &rm))
			gauges, lookups, floats := map[string]int64{}, map[string]int64{}, map[string]float64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Gauge[int64]:
						gauges[m.Name] = d.DataPoints[0].Value
					case metricdata.Sum[int64]:
						require.True(t, d.IsMonotonic, m.Name)
						for _, p := range d.DataPoints {
							r, _ := p.Attributes.Value("oncekv.cache.result")
							lookups[r.AsString()] = p.Value
						}
					case metricdata.Gauge[float64]:
						floats[m.Name] = d.DataPoints[0].Value
					}
				}
			}
			return gauges, lookups, floats
		}
		gauges, lookups, floats := collect()
		st := l.Stats()
		want := map[string]int64{
			"oncekv.ledger.directory.records": 3,
			"oncekv.ledger.directory.size":    3 * ledger.DirectoryBytesPerRecord,
			"oncekv.ledger.cache.records":     3,
			"oncekv.ledger.cache.size":        st.CachedBytes,
			"oncekv.writer.queued":            0,
			"oncekv.db.sync_failed":           0,
		}
		wantLookups := map[string]int64{"hit": 2, "miss": 0}
		if off {
			want["oncekv.ledger.cache.records"], want["oncekv.ledger.cache.size"] = 0, 0
			wantLookups = map[string]int64{"hit": 0, "miss": 2}
		} else {
			require.Positive(t, st.CachedBytes)
		}
		require.Equal(t, want, gauges, "cache off: %t", off)
		require.Equal(t, wantLookups, lookups, "cache off: %t", off)
		require.Contains(t, floats, "oncekv.ledger.directory.rebuild.duration", "the rebuild's duration is reported")
		require.Zero(t, floats["oncekv.writer.held"], "no write transaction runs")

		// A write transaction that holds the writer, and two calls queued
		// behind it.
		held, release := make(chan struct{}), make(chan struct{})
		var wg sync.WaitGroup
		heldOnce := sync.OnceFunc(func() { close(held) }) // once, should the function run again
		wg.Go(func() {
			_ = db.Batch(ctx, func(kv.Tx) error { heldOnce(); <-release; return nil })
		})
		<-held
		for range 2 {
			wg.Go(func() { _ = db.Batch(ctx, func(kv.Tx) error { return nil }) })
		}
		require.Eventually(t, func() bool { return db.Writer().Queued == 2 }, 10*time.Second, time.Millisecond)
		gauges, _, floats = collect()
		require.Positive(t, floats["oncekv.writer.held"])
		require.Equal(t, int64(2), gauges["oncekv.writer.queued"])
		close(release)
		wg.Wait()

		require.NoError(t, reg.Unregister())
		gauges, lookups, _ = collect()
		require.Empty(t, gauges)
		require.Empty(t, lookups)
		require.NoError(t, mp.Shutdown(ctx))
		require.NoError(t, db.Close())
	}
}

// oncekv.db.sync_failed turns 1 once a commit's sync failed after its meta
// page was written, on a disk that fails that sync (powercut's failat,
// kvtest.PowerDisk.FailSync): the database refuses every call from then
// on, and the gauge is what an alert or a liveness check watches.
func TestSyncFailedGauge(t *testing.T) {
	bin := kvtest.PowercutProgram(t)
	ctx := context.Background()
	mnt := t.TempDir()
	disk := kvtest.MountPowerDisk(t, bin, mnt, t.TempDir())
	db, err := kv.Open(filepath.Join(mnt, "l.db"), nil)
	require.NoError(t, err)
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := oncekvotel.ObserveLedger(l, &oncekvotel.Options{MeterProvider: mp})
	require.NoError(t, err)
	failed := func() int64 {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == "oncekv.db.sync_failed" {
					return g.DataPoints[0].Value
				}
			}
		}
		t.Fatal("no oncekv.db.sync_failed")
		return -1
	}
	require.Zero(t, failed())
	// A commit syncs its pages, then its meta page: the second sync from
	// now is the meta page's, unless bbolt synced the file it grew first
	// (then the pages' sync fails, nothing is written, and it goes again).
	for attempt := 0; db.Err() == nil; attempt++ {
		require.Less(t, attempt, 10, "no failed sync made the database refuse calls")
		require.NoError(t, disk.FailSync(2))
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: fmt.Sprint("k", attempt), Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.Error(t, err)
		require.NoError(t, disk.SyncFailed())
		if db.Err() == nil {
			require.Zero(t, failed(), "a failed pages' sync leaves the database serving")
		}
	}
	require.ErrorIs(t, db.Err(), kv.ErrSyncFailed)
	require.Equal(t, int64(1), failed())
	require.NoError(t, reg.Unregister())
	require.NoError(t, mp.Shutdown(ctx))
	require.NoError(t, db.Close())
	disk.Unmount()
}

// What a backend counts of its own (etcd's conflicts and retries) is
// exported as oncekv.<backend>.<count>, a monotonic counter read at each
// collection, with the unit and description the backend gives.
func TestObserveLedgerBackendCounters(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	backend := kvtest.Counting(kvtest.Open(t, &kv.Options{NoSync: true}))
	db, err := kv.New(backend, nil)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	l, err := ledger.New(db, nil)
	require.NoError(t, err)
	reg, err := oncekvotel.ObserveLedger(l, &oncekvotel.Options{MeterProvider: mp})
	require.NoError(t, err)
	defer func() { require.NoError(t, reg.Unregister()) }()
	for _, k := range []string{"a", "b", "c"} {
		_, err := l.Do(ctx, ledger.Request{Scope: "acme|POST /v1/orders", Key: k, Fingerprint: ledger.Fingerprint{1}},
			func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201}, nil })
		require.NoError(t, err)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "oncekv.counting.updates" {
				continue
			}
			found = true
			require.Equal(t, "{transaction}", m.Unit)
			require.Equal(t, "Write transactions run.", m.Description)
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok && sum.IsMonotonic, "a monotonic counter: %T", m.Data)
			require.Len(t, sum.DataPoints, 1)
			require.Equal(t, int64(backend.Updates()), sum.DataPoints[0].Value)
			require.GreaterOrEqual(t, sum.DataPoints[0].Value, int64(3), "the three requests' transactions")
		}
	}
	require.True(t, found, "oncekv.counting.updates not exported")
}

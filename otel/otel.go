package oncekvotel

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/observe"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/oncekv/oncekv"

// Options configure New. A nil *Options means the global providers.
type Options struct {
	MeterProvider  metric.MeterProvider // nil: otel.GetMeterProvider()
	TracerProvider trace.TracerProvider // nil: otel.GetTracerProvider()
	// TenantAttribute adds oncekv.tenant to the request metrics. Off by
	// default: every tenant becomes a time series.
	TenantAttribute bool
}

// withDefaults returns a copy of o (nil: all defaults) with the global
// meter provider where none is set.
func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.MeterProvider == nil {
		r.MeterProvider = otel.GetMeterProvider()
	}
	return r
}

type instruments struct {
	requests, sweepDeleted, transitions, providerCalls, publishes, messages metric.Int64Counter
	requestDur, commitDur, writeDur, sweepDur, providerDur                  metric.Float64Histogram
	recordSize, commitCalls                                                 metric.Int64Histogram
	pending, quarantined, damaged                                           metric.Int64Gauge
	oldestAge                                                               metric.Float64Gauge
}

// New returns an observer that records oncekv's metrics and spans. Set it
// in kv.Options.Observer.
func New(opts *Options) (*observe.Observer, error) {
	o := opts.withDefaults()
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	m := o.MeterProvider.Meter(ScopeName)
	tracer := o.TracerProvider.Tracer(ScopeName)
	var in instruments
	var err error
	counter := func(dst *metric.Int64Counter, name, unit, desc string) {
		if err == nil {
			*dst, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
	}
	seconds := func(dst *metric.Float64Histogram, name, desc string) {
		if err == nil {
			*dst, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc))
		}
	}
	counter(&in.requests, "oncekv.request.outcomes", "{request}", "Ledger calls and idempotent HTTP requests, by outcome.")
	seconds(&in.requestDur, "oncekv.request.duration", "Duration of ledger calls and idempotent HTTP requests.")
	counter(&in.sweepDeleted, "oncekv.sweep.deleted", "{record}", "Records removed by retention sweeps.")
	seconds(&in.sweepDur, "oncekv.sweep.duration", "Duration of a retention sweep of one record kind.")
	seconds(&in.commitDur, "oncekv.commit.duration", "Duration of a write transaction, functions included.")
	seconds(&in.writeDur, "oncekv.commit.write.duration", "Time bbolt spent writing pages and fsyncing in a commit.")
	counter(&in.transitions, "oncekv.intent.transitions", "{transition}", "Side-effect intents entering a state.")
	counter(&in.providerCalls, "oncekv.provider.calls", "{call}", "Calls to side-effect providers, by outcome.")
	seconds(&in.providerDur, "oncekv.provider.duration", "Duration of a provider call.")
	counter(&in.publishes, "oncekv.outbox.publishes", "{event}", "Outbox events handed to the publisher, by result.")
	counter(&in.messages, "oncekv.inbox.messages", "{message}", "Messages handled by the inbox, duplicates included.")
	if err == nil {
		in.recordSize, err = m.Int64Histogram("oncekv.record.size", metric.WithUnit("By"), metric.WithDescription("Bytes of the idempotency records stored."))
	}
	if err == nil {
		in.commitCalls, err = m.Int64Histogram("oncekv.commit.calls", metric.WithUnit("{call}"), metric.WithDescription("Calls group commit put in one write transaction."))
	}
	if err == nil {
		in.pending, err = m.Int64Gauge("oncekv.outbox.pending", metric.WithUnit("{event}"), metric.WithDescription("Outbox events not yet published."))
	}
	if err == nil {
		in.quarantined, err = m.Int64Gauge("oncekv.outbox.quarantined", metric.WithUnit("{event}"), metric.WithDescription("Outbox events put aside after too many failures."))
	}
	if err == nil {
		in.damaged, err = m.Int64Gauge("oncekv.outbox.damaged", metric.WithUnit("{event}"), metric.WithDescription("Pending outbox events that do not decode: never published until dropped (oncekv drop --kind outbox)."))
	}
	if err == nil {
		in.oldestAge, err = m.Float64Gauge("oncekv.outbox.oldest_age", metric.WithUnit("s"), metric.WithDescription("Age of the oldest unpublished outbox event."))
	}
	if err != nil {
		return nil, err
	}
	return in.observer(tracer, o.TenantAttribute), nil
}

func (in *instruments) observer(tracer trace.Tracer, tenants bool) *observe.Observer {
	return &observe.Observer{
		Request: func(ctx context.Context, e observe.Request) {
			attrs := []attribute.KeyValue{attribute.String("oncekv.call", e.Call), attribute.String("oncekv.outcome", string(e.Outcome))}
			in.requestDur.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
			if tenants {
				attrs = append(attrs, attribute.String("oncekv.tenant", e.Tenant))
			}
			in.requests.Add(ctx, 1, metric.WithAttributes(attrs...))
			if e.RecordBytes > 0 {
				in.recordSize.Record(ctx, int64(e.RecordBytes), metric.WithAttributes(attribute.String("oncekv.call", e.Call)))
			}
		},
		Commit: func(e observe.Commit) {
			ctx := context.Background()
			in.commitDur.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attribute.Bool("error", e.Err)))
			in.commitCalls.Record(ctx, int64(e.Calls))
			if e.Write > 0 {
				in.writeDur.Record(ctx, e.Write.Seconds())
			}
		},
		Sweep: func(e observe.Sweep) {
			ctx := context.Background()
			kind := metric.WithAttributes(attribute.String("oncekv.kind", e.Kind))
			if !e.DryRun {
				in.sweepDeleted.Add(ctx, int64(e.Deleted), kind)
			}
			in.sweepDur.Record(ctx, e.Duration.Seconds(), kind)
		},
		Intent: func(ctx context.Context, e observe.Intent) {
			in.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("oncekv.intent.kind", e.Kind), attribute.String("oncekv.intent.state", e.State)))
		},
		ProviderCall: func(ctx context.Context, e observe.ProviderCall) {
			kind, op := attribute.String("oncekv.intent.kind", e.Kind), attribute.String("oncekv.provider.op", e.Op)
			in.providerCalls.Add(ctx, 1, metric.WithAttributes(kind, op, attribute.String("oncekv.outcome", e.Outcome)))
			in.providerDur.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(kind, op))
		},
		Publish: func(ctx context.Context, e observe.Publish) {
			result := "ok"
			switch {
			case e.Quarantined:
				result = "quarantined"
			case e.Err:
				result = "error"
			}
			in.publishes.Add(ctx, 1, metric.WithAttributes(attribute.String("oncekv.topic", e.Topic), attribute.String("oncekv.result", result)))
		},
		OutboxLag: func(e observe.OutboxLag) {
			ctx := context.Background()
			in.pending.Record(ctx, int64(e.Pending))
			in.quarantined.Record(ctx, int64(e.Quarantined))
			in.damaged.Record(ctx, int64(e.Damaged))
			in.oldestAge.Record(ctx, e.OldestAge.Seconds())
		},
		Message: func(ctx context.Context, e observe.Message) {
			in.messages.Add(ctx, 1, metric.WithAttributes(attribute.String("oncekv.consumer", e.Consumer), attribute.String("oncekv.duplicate", strconv.FormatBool(e.Duplicate))))
		},
		Span: func(ctx context.Context, name string, attrs ...observe.Attr) (context.Context, func(error)) {
			kvs := make([]attribute.KeyValue, len(attrs))
			for i, a := range attrs {
				kvs[i] = attribute.String(a.Key, a.Value)
			}
			ctx, span := tracer.Start(ctx, name, trace.WithAttributes(kvs...))
			return ctx, func(err error) {
				if err != nil {
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				}
				span.End()
			}
		},
	}
}

// ObserveLedger reports the figures of l's record store in this process
// (ledger.Stats) as observable instruments, read at each collection: the
// key directory's records and heap, its rebuild time at open, and the
// cache of recent records (records, bytes, look-ups answered and missed),
// which says whether kv.Options.RecentCacheBytes keeps your clients'
// retries in memory; and its database's writer (kv.DB.Writer): how long
// the running write transaction has held it, and the writes queued behind
// it; and whether the database refuses calls after a failed sync
// (oncekv.db.sync_failed: alert on it). Every ledger over one database
// shares one store:
// observe one of them. On a backend with several writers (etcd: the keyed
// layout, no directory and no cache, several writers and no group
// commit) the figures are zero; what such a backend counts of its own
// (kv.DB.Counters: etcd's conflicts, retries, lost answers and guesses) is
// reported instead, each count a monotonic counter named
// oncekv.<backend>.<count> (oncekv.etcd.conflicts). Unregister the
// registration when the ledger's database closes.
func ObserveLedger(l *ledger.Ledger, opts *Options) (metric.Registration, error) {
	m := opts.withDefaults().MeterProvider.Meter(ScopeName)
	var err error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		var g metric.Int64ObservableGauge
		if err == nil {
			g, err = m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return g
	}
	records := gauge("oncekv.ledger.directory.records", "{record}", "Record positions the ledger's in-memory key directory holds.")
	dirBytes := gauge("oncekv.ledger.directory.size", "By", "Estimated heap of the ledger's key directory.")
	cached := gauge("oncekv.ledger.cache.records", "{record}", "Records in the cache of recent records.")
	cachedBytes := gauge("oncekv.ledger.cache.size", "By", "Bytes of the records in the cache of recent records.")
	queued := gauge("oncekv.writer.queued", "{call}", "Writes queued behind the database's running write transaction.")
	syncFailed := gauge("oncekv.db.sync_failed", "1", "1 once a commit's sync failed after its meta page was written (kv.ErrSyncFailed): the database refuses every call until it is reopened; restart the service. 0 before.")
	var lookups metric.Int64ObservableCounter
	var rebuild, held metric.Float64ObservableGauge
	if err == nil {
		lookups, err = m.Int64ObservableCounter("oncekv.ledger.cache.lookups", metric.WithUnit("{lookup}"),
			metric.WithDescription("Look-ups of a known key answered from the cache of recent records (hit) or read from the file (miss)."))
	}
	if err == nil {
		rebuild, err = m.Float64ObservableGauge("oncekv.ledger.directory.rebuild.duration", metric.WithUnit("s"),
			metric.WithDescription("Time the key directory took to rebuild when this process opened the database."))
	}
	if err == nil {
		held, err = m.Float64ObservableGauge("oncekv.writer.held", metric.WithUnit("s"),
			metric.WithDescription("How long the running write transaction has held the database's writer (0: none runs); every other write waits for it."))
	}
	counts := l.DB().Counters()
	backend := make([]metric.Int64ObservableCounter, len(counts))
	for i, c := range counts {
		if err == nil {
			backend[i], err = m.Int64ObservableCounter("oncekv."+l.DB().Traits().Name+"."+c.Name, metric.WithUnit(c.Unit), metric.WithDescription(c.Description))
		}
	}
	if err != nil {
		return nil, err
	}
	instruments := []metric.Observable{records, dirBytes, cached, cachedBytes, lookups, rebuild, held, queued, syncFailed}
	for _, c := range backend {
		instruments = append(instruments, c)
	}
	hit := metric.WithAttributes(attribute.String("oncekv.cache.result", "hit"))
	miss := metric.WithAttributes(attribute.String("oncekv.cache.result", "miss"))
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := l.Stats()
		o.ObserveInt64(records, int64(st.Records))
		o.ObserveInt64(dirBytes, st.DirectoryBytes)
		o.ObserveInt64(cached, int64(st.Cached))
		o.ObserveInt64(cachedBytes, st.CachedBytes)
		o.ObserveInt64(lookups, int64(st.CacheHits), hit)    // #nosec G115 -- a count since open
		o.ObserveInt64(lookups, int64(st.CacheMisses), miss) // #nosec G115 -- a count since open
		o.ObserveFloat64(rebuild, st.RebuildTime.Seconds())
		w := l.DB().Writer()
		o.ObserveFloat64(held, w.Held.Seconds())
		o.ObserveInt64(queued, int64(w.Queued))
		failed := int64(0)
		if errors.Is(l.DB().Err(), kv.ErrSyncFailed) {
			failed = 1
		}
		o.ObserveInt64(syncFailed, failed)
		for i, c := range l.DB().Counters() {
			if i < len(backend) {
				o.ObserveInt64(backend[i], int64(c.Value)) // #nosec G115 -- a count since open
			}
		}
		return nil
	}, instruments...)
}

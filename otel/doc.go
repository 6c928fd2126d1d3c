// Package oncekvotel reports oncekv's observer port (package observe) to
// OpenTelemetry: metrics through go.opentelemetry.io/otel/metric and spans
// through go.opentelemetry.io/otel/trace. It is a module of its own so the
// library stays free of dependencies.
//
//	obs, err := oncekvotel.New(&oncekvotel.Options{MeterProvider: mp, TracerProvider: tp})
//	db, err := kv.Open("app.db", &kv.Options{Observer: obs})
//
// Every package built on that database then reports: the ledger's
// outcomes, group commit, sweeps, intents and provider calls, the outbox
// relay, the inbox. Nil providers mean the global ones (otel.GetMeterProvider,
// otel.GetTracerProvider).
//
// # Metrics
//
// Names follow the OpenTelemetry semantic conventions (lowercase, dotted,
// units in UCUM, durations in seconds):
//
//	instrument                     kind       unit          attributes
//	oncekv.request.outcomes        counter    {request}     oncekv.call, oncekv.outcome (oncekv.tenant with Options.TenantAttribute)
//	oncekv.request.duration        histogram  s             oncekv.call, oncekv.outcome
//	oncekv.record.size             histogram  By            oncekv.call (records stored)
//	oncekv.commit.duration         histogram  s             error
//	oncekv.commit.write.duration   histogram  s             (bbolt: pages written and fsynced)
//	oncekv.commit.calls            histogram  {call}        (calls group commit put in one transaction)
//	oncekv.sweep.deleted           counter    {record}      oncekv.kind
//	oncekv.sweep.duration          histogram  s             oncekv.kind
//	oncekv.intent.transitions      counter    {transition}  oncekv.intent.kind, oncekv.intent.state
//	oncekv.provider.calls          counter    {call}        oncekv.intent.kind, oncekv.provider.op, oncekv.outcome
//	oncekv.provider.duration       histogram  s             oncekv.intent.kind, oncekv.provider.op
//	oncekv.outbox.publishes        counter    {event}       oncekv.topic, oncekv.result (ok, error, quarantined)
//	oncekv.outbox.pending          gauge      {event}
//	oncekv.outbox.oldest_age       gauge      s
//	oncekv.outbox.quarantined      gauge      {event}
//	oncekv.inbox.messages          counter    {message}     oncekv.consumer, oncekv.duplicate
//
// ObserveLedger adds, read from ledger.Stats and kv.DB.Writer at each
// collection, the figures of the ledger's record store in this process and
// of its database's writer:
//
//	instrument                                 kind               unit      attributes
//	oncekv.ledger.directory.records            gauge              {record}
//	oncekv.ledger.directory.size               gauge              By
//	oncekv.ledger.directory.rebuild.duration   gauge              s         (at open)
//	oncekv.ledger.cache.records                gauge              {record}
//	oncekv.ledger.cache.size                   gauge              By
//	oncekv.ledger.cache.lookups                counter            {lookup}  oncekv.cache.result (hit, miss)
//	oncekv.writer.held                         gauge              s         (0: no write transaction runs)
//	oncekv.writer.queued                       gauge              {call}
//
// Many misses for retries mean the cache of recent records is too small
// for how long your clients take to retry (kv.Options.RecentCacheBytes).
// A writer held for seconds holds back every write of the service: a
// function that waits on something inside its transaction, most often.
//
// On a backend that counts events of its own (kv.DB.Counters: etcd's
// conflicts, retries, lost answers and guesses, etcdkv.Backend.Stats),
// ObserveLedger also exports each count as a monotonic counter named
// oncekv.<backend>.<count>, with the backend's unit and description:
// oncekv.etcd.conflicts, oncekv.etcd.answers_lost, and so on. This module
// does not import the backend's.
//
// Tenants are left out of the request attributes by default: their number
// is the caller's, and every value is a time series.
//
// # Spans
//
// oncekv.ledger.do, oncekv.ledger.claim and oncekv.ledger.complete around
// the ledger calls (attribute oncekv.scope); oncekv.provider.do and
// oncekv.provider.status around each provider call (oncekv.intent.kind,
// oncekv.downstream_key; never the payload), whose context is the one
// Provider.Do and Status receive, so a provider client's HTTP spans nest
// under them; oncekv.outbox.publish around each batch handed to the
// publisher. A rejection (mismatch, in progress, quota) is an answer, not
// an error: only failures set the span's status.
package oncekvotel

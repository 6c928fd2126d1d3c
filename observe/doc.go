// Package observe is oncekv's observer port: one struct of optional
// functions that every package reports to, so metrics and traces need no
// dependency in the library. Set it once, in kv.Options.Observer; the
// ledger, group commit, the side-effect executor, the outbox relay, the
// inbox and retention sweeps find it through the database
// (kv.DB.Observer). The module github.com/oncekv/oncekv/otel turns it into
// OpenTelemetry metrics and spans; a test can count events with plain
// functions.
//
// Every field may be nil, and so may the *Observer: the packages check
// before they build an event, so an unset observer costs one comparison
// on the hot path and allocates nothing (bench: BenchmarkObserverUnset).
// Functions are called synchronously on the caller's goroutine, some
// inside a write transaction (Commit after it): they must be quick and
// must not call back into the database.
//
// What is reported, by field:
//
//   - Request: every ledger call's outcome (new, replay, mismatch,
//     in_progress, waited, quota, takeover, error) with its tenant and the
//     bytes a new record stores. The idemhttp middleware's OnEvent and
//     counters remain, and report through it too.
//   - Commit: every write transaction the database commits: how many calls
//     group commit put in it, how long the commit took and, on bbolt, how
//     much of that was writing and fsyncing.
//   - Sweep: each record kind a retention sweep went through.
//   - Intent: every state a side-effect intent enters, needs_attention
//     included; ProviderCall: every provider call, its duration and
//     outcome.
//   - Publish: every event the outbox relay tried to publish;
//     OutboxLag: the relay's backlog at each pass (pending events, age of
//     the oldest, quarantined ones, damaged ones).
//   - Message: every message the inbox handled: new or duplicate.
//   - Span: opens a span around a ledger call, a provider call and a
//     publish; the context it returns is passed on (into Provider.Do and
//     Status), so a provider client's own HTTP spans nest under it.
package observe

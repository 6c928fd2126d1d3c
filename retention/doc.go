// Package retention removes records that are past their retention: expired
// idempotency records, old inbox message IDs, published outbox rows and
// finished intents. How long a key is kept is a business decision: a retry
// that arrives after its key is gone runs again.
//
// # Policy
//
// A Policy gives each kind a retention (24 hours after completion for
// idempotency records, 7 days for inbox IDs, 1 hour for published events, 30
// days for finished intents), optionally per scope prefix. Validate rejects a
// policy that would break a guarantee — an idempotency retention shorter than
// the lease or than the clients' retry horizon, an inbox window shorter than
// the broker's redelivery horizon — with an error that says why. The writers
// take the policy as a function:
//
//	pol := retention.Policy{Overrides: []retention.Override{
//		{Kind: retention.Idempotency, ScopePrefix: "acme|", Retention: 72 * time.Hour},
//	}}
//	if err := pol.Validate(retention.Constraints{Lease: 30 * time.Second, ClientRetryHorizon: time.Hour}); err != nil { ... }
//	l, _ := ledger.New(db, &ledger.Config{RetentionFor: pol.Func(retention.Idempotency)})
//
// Each record stores its expiry when it is written, and every read path
// treats a record at or past its expiry as absent, so a sweep never changes
// an observable answer; it only reclaims space. Records with no retention —
// in-progress claims with a live lease, pending intents, unpublished events,
// intents parked as needs_attention, quarantined events — have no expiry
// entry and are never swept.
//
// # Sweeping
//
// Sweep walks each kind's expiry index (kept by the writers in the same
// transaction as the record), so its cost follows what has expired, not the
// size of the database. It removes records in bounded batches, each its own
// short write transaction (a size limit and a time budget), yielding between
// batches so request transactions keep flowing; re-checks each record's
// state before removing it; supports a dry run; reports per-kind stats
// (examined, deleted, skipped and why, batches, longest transaction); and
// stops cleanly on context cancellation. Run repeats it on an interval; a
// sweep that panics (an observer's panic, say) is that sweep's error,
// logged with its stack through Config.Logger, and the process goes on.
//
// # Caveats
//
//   - A sweep frees pages inside the file; bbolt reuses them for new writes
//     but never shrinks the file. Use `oncekv compact` to write a smaller copy.
//   - Changing a policy affects records written afterwards; records keep the
//     expiry they were written with.
//   - Expiry is read on the database's clock (kv.Options.Clock, the wall
//     clock unless set), by every read and by the sweep alike: a clock
//     stepped forward by an hour expires an hour's records early, and a
//     retry of one of them runs again; a step back keeps records longer.
//     Neither reads nor sweeps can tell a step from time passing, so run
//     the host with a clock that slews (NTP, chrony) rather than steps,
//     and keep retentions well past the clients' retry horizon. Leases are
//     read on the same clock.
package retention

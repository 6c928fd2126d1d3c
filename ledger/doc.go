// Package ledger stores idempotency-key records so that a request retried by
// a client, an SDK, a proxy or a queue takes effect once: the first attempt
// runs, later attempts with the same key and the same content get the stored
// response back byte for byte, and attempts that reuse a key for different
// content are rejected.
//
// # Records and scopes
//
// A record is identified by a scope and a key. The scope is the tenant (from
// the server's own authentication, never a client header) plus the endpoint
// (method and route pattern), built by Scope; the key is the client's
// Idempotency-Key (1 to 255 bytes of visible ASCII, see ValidateKey;
// idemhttp.ParseKey reads the header). A record
// holds a status (in_progress or completed), the request's Fingerprint, the
// stored Response, a version, a lease and its times. A record past its
// retention is treated as absent whether or not a sweep has removed it.
//
// Fingerprints (computed by package fingerprint) are SHA-256 over the
// method, the concrete target (escaped path and raw query, not the route
// pattern: a key reused on another resource is a mismatch) and the body. JSON
// bodies are canonicalised first (sorted keys, no insignificant whitespace,
// numbers as written, configured fields such as client timestamps removed),
// so a client that re-serialises its request still matches. Fingerprints are
// compared in constant time.
//
// # Single-transaction path
//
// When all the work is inside the database, Do runs it in one transaction
// with the record: the business writes, the record and the response commit
// together or not at all. In-progress is never visible, and a failure rolls
// everything back so a retry simply runs again.
//
//	res, err := l.Do(ctx, ledger.Request{Scope: scope, Key: key, Fingerprint: fp},
//		func(tx kv.Tx) (ledger.Response, error) {
//			// business writes through tx
//			return ledger.Response{Status: 201, Body: body}, nil
//		})
//
// # Two-phase path
//
// When the work calls something outside (a payment provider), the claim must
// be durable before the call. Claim commits an in-progress record with a
// lease and a version; the work runs; Complete commits the response and the
// caller's business writes only if the version still matches. A retry that
// arrives after the lease expired takes the claim over with version+1 (the
// Claim says Takeover), so the original attempt, if it was only paused,
// completes nothing. A takeover must not redo the outside work blindly: ask
// the outside system first (package sideeffect does).
//
//	out, err := l.Claim(ctx, req)
//	if out.Replay != nil { return out.Replay.Response }
//	charge, err := provider.Charge(ctx, ...)
//	_, err = l.Complete(ctx, out.Claim, resp, func(tx kv.Tx) error { /* mark paid */ })
//
// bbolt's file lock means one process owns the file, so a claim carries the
// incarnation of the process that made it. With Config.RecoverOrphans, a
// claim left by an earlier incarnation (a dead process) is taken over at once
// on the next attempt instead of after its lease.
//
// A concurrent duplicate of an in-progress request gets *InProgressError
// with a retry hint or, with Request.Wait, waits for the first attempt through
// an in-process notification.
//
// Every operation has a managed form (Do, Claim, Complete, Release, Extend)
// that opens its own transaction under group commit, and a Tx form (DoTx,
// ClaimTx, ...) that works inside the caller's transaction and never commits.
//
// # Reading records
//
// On bbolt, records are appended to a log in expiry order (its newest
// entries in a one-page tail beside it, moved to the log a page at a time,
// so a transaction writes one page for its record rather than the log's
// whole path) and found through an in-memory directory rebuilt at open
// (Stats: Records, Rebuilt, RebuildTime): a key never seen costs no read
// transaction, and a record found is always checked against the (scope,
// key) asked for. Records this
// process committed recently are also kept in a bounded cache
// (kv.Options.RecentCacheBytes, 16 MiB by default, or off; Stats: Cached,
// CachedBytes, CacheHits, CacheMisses), so that a retry, which comes soon
// after its original, is answered with no read transaction at all. An entry enters the cache only after its commit and
// leaves it inside any transaction that changes the record, before that
// commits: the cache never answers with a record the file no longer holds.
//
// On etcd, which has no directory, Do looks the key up in its write
// transaction only: a replay, a mismatch or a conflict writes nothing, so
// that transaction sends no commit, and a new key saves a read round trip.
// The look-up fetches the record and its tenant's usage counter in one
// request, and its first attempt guesses instead (etcdkv's "Guessing
// instead of reading"): the record of a request admitted as absent, the
// counter as this process last wrote it. A new key then costs one round
// trip, its commit, and a replay one, the record's read, and so do
// Complete and Release of a claim this process made; with
// etcdkv.Options.NoGuessing, a new key costs two (the read and the
// commit), and so do Claim, Complete and Release.
//
// # Caveats
//
//   - A key is remembered only for its retention (Config.Retention, 24 hours
//     by default). A retry that arrives later runs again.
//   - Functions run under the managed forms may run more than once (group
//     commit re-runs a batch when one of its calls fails). They must have no
//     effect outside the transaction.
//   - The ledger makes the database side exactly-once. An outside call in the
//     two-phase path is at-least-once unless the outside system honours a key
//     of its own; derive one from the claim (package sideeffect).
//   - Waiting for an in-progress claim works within one process only.
//   - With kv.Options.Cipher set, stored response headers and bodies are
//     sealed (package seal, after compression), bound to scope and key;
//     scopes, keys, statuses, fingerprints, times and sizes stay clear. A
//     replay whose response does not open fails with a *RecordError
//     wrapping a *seal.OpenError; Records and InspectTx list such records
//     with Sealed set instead. Reseal is the ledger's part of inspect.Rekey.
package ledger

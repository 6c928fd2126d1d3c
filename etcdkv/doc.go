// Package etcdkv is an oncekv backend (kv.Backend) over etcd v3, for a
// service that runs as several replicas: every replica opens the same
// cluster and prefix, and a retry that lands on another replica finds the
// first attempt's record. Open it and hand it to kv.New; the rest of
// oncekv (ledger, idemhttp, inbox, outbox, sideeffect, retention, the
// CLI's --etcd) works unchanged.
//
// # Transactions
//
// A transaction is serializable and optimistic. Its reads happen at one
// revision, fixed by the first read; its writes are buffered (it reads its
// own writes); Update commits them as one etcd Txn whose compares say that
// nothing it read has changed: the mod revision of every key read (0 for a
// key read as absent), and for every range a cursor walked, that no key in
// the range was written after the read revision. A cursor fetches 128 keys
// at a time, and the range it walked is what it fetched: a scan that its
// caller stops at the end of a group of keys has still walked the page
// past it, or, on a short page, every key to the end of the bucket, and
// conflicts with every write there. Scan a group through kv.RangeCursor
// (the bucket implements kv.Ranger), which fetches and compares
// [lo, hi) alone: the ledger's exact quota check reads one tenant's usage
// counters so. A range compare cannot
// see a key that was deleted, so every bucket also carries a delete
// generation, bumped by a transaction that deletes in it and compared by
// one that scanned it (a bounded scan too: a delete anywhere in the
// bucket refuses it). A transaction whose compares fail ran on stale
// reads: its function runs again, after a jittered backoff, up to
// Options.MaxAttempts times (ErrConflict then); from Options.SoloAfter
// attempts on it runs alone within its process, so a transaction that
// keeps losing to its neighbours wins eventually. The function must
// therefore have no effect outside the transaction, which is what
// kv.Backend asks of every backend. A transaction that wrote nothing
// sends no commit (and kv's observer counts none); one that knows which
// keys it will read can fetch them in one request first (Prefetch,
// kv.BucketKey): the ledger reads a record and its tenant's usage counter
// so, package conditional's writes read a row and its unique index
// entries so, and the outbox an event's ID and the places its number may
// be taken (and the markers of buckets not known to exist come with
// them). A write transaction's first attempt may even skip that read (see
// Guessing instead of reading). A read-only transaction (View) whose
// read fails in a way worth another attempt (a leader change; its
// revision compacted away under a long scan) runs its function again in a
// fresh transaction: a View function must start afresh too, keeping
// nothing a first run gathered (kvtest.RetriedViews tests that).
//
// # Guessing instead of reading
//
// A write transaction's first attempt guesses what its prefetch names
// instead of reading it: a key's value as this process last wrote or
// read it (a memo of up to 4 MiB, values up to 8 KiB), and a key the
// caller marked kv.BucketKey.Absent (a new request's record, a new row,
// an event's ID) as absent. What is neither is read as before. The commit
// compares every guess like any read, so a wrong guess never commits:
// the commit is refused, the same request reads back what the guessed keys
// hold, and the second attempt runs on those, without a backoff. An
// attempt that guessed and then failed, or wrote nothing, decided on
// values nothing has confirmed; it is void, and the function runs again,
// reading for real, so an error or an answer is never one a guess made
// (a replay costs that one read, as it did before guessing).
//
// So on etcd an idempotent write of a new key is one round trip, its
// commit, once the process has seen its tenant's usage counter (one of
// 1,024 per tenant); a replay is one, the record's read; completing or
// releasing a claim this process made is one. A wrong guess costs a
// refused commit (a Raft round, dearer than the read it was to save):
// when more than half of a process's recent first attempts that guessed
// were refused (another replica keeps writing what it remembers, or its
// requests are mostly retries first seen by another replica), it stops
// guessing for 16 transactions, doubling up to 1,024 while they keep
// failing. A refusal a transaction that read would have met as well (a
// commit of this process changed a key after the guess) is a conflict,
// and does not count against guessing. Backend.GuessStats counts
// how the guesses fared (oncekv bench --against-etcd prints it), and
// Options.NoGuessing turns guessing off.
//
// # Watching it run
//
// Backend.Stats counts, since the backend was made, what its transactions
// met: commits refused for a conflict, transactions refused on every
// attempt or run alone, attempts retried after etcd was briefly out of
// reach, commits whose answer was lost (and of them those that stayed
// unknown), and the guesses. The backend is a kv.Counting, so
// kv.DB.Counters returns the same counts by name, and the OpenTelemetry
// adapter's ObserveLedger exports them as oncekv.etcd.conflicts and so on,
// without this module in its imports. Conflicts over updates is the share
// of commits replicas lose to each other.
//
// # Prefixes
//
// Every key a backend writes begins with its Options.Prefix, so several
// databases share a cluster. A prefix that begins with another's would put
// its keys inside the other's ranges, where they show as buckets; nothing
// in the keys themselves can tell the two apart. So a backend records its
// prefix in a registry outside every database (keys beginning with
// "\x00oncekv/prefixes/") before its first write, and before its first read
// or write refuses, with ErrNestedPrefix, a prefix that nests with a
// recorded one. A backend that only reads records nothing. The check costs
// one round trip per backend, once; the recording a second, once per
// prefix. Prefixes lists the registry (oncekv prefixes --etcd shows it);
// Drop deletes a retired database and its record. Under etcd's
// RBAC, a user granted only its own prefix may not read the registry: its
// backend skips the check (the roles keep databases apart); grant its role
// read and write on the registry's keys to have the check too.
//
// # Limits
//
// etcd bounds a Txn to 128 operations (--max-txn-ops) and a request to
// 1.5 MiB (--max-request-bytes). A transaction whose writes or compares
// exceed them fails with a *TxTooLargeError before anything is sent, not
// with a server error; kv.Traits.MaxTxOps tells the packages above to
// split their work (sweeps, batches, migrations) below it. Set
// Options.MaxTxOps and MaxRequestBytes to the cluster's own values if they
// were raised.
//
// # An unknown outcome
//
// A commit whose request times out after it was sent may or may not have
// applied: the prototype reported three commits as failed that had in fact
// applied. Every commit therefore carries a marker key that the Txn
// creates, and whose absence it compares. When the answer is lost, the
// backend fences the marker: it writes "aborted" under it unless it
// exists. If the fence lands, the commit can never apply; if the marker is
// there, the commit did. Either way the caller learns the truth, and the
// function runs again only when the commit did not apply. ErrCommitUnknown
// (kv.ErrCommitUnknown) is returned only when etcd cannot be reached to
// settle it; retrying the whole operation is then safe, since the records
// make it idempotent (idemhttp answers 503 with Retry-After to say so).
// Markers live on a lease and vanish a few minutes after their commit. A
// lease carries at most 4,096 of them: etcd deletes an expired lease's keys
// in one transaction that every write of the cluster waits for (a lease
// of 60,000 markers held writes for 0.36 s on one member without fsync,
// 5,000 for 13 ms).
//
// # What changes above
//
// Traits report no single writer, no group commit, MaxTxOps and Watch.
// With several writers the ledger keeps its records under their keys (no
// in-memory directory, which one process cannot keep for all), takes over
// another replica's claim only after its lease, and its waiters follow the
// record with a watch; the outbox numbers events under a random prefix per
// process (one shared counter would be a key every writer conflicts on)
// and its relay orders them by the revision that created them, the events
// of one commit in the order they were added, which takes a read of the
// whole queue: once a pass, and not again while the queue's head waits out
// its backoff; a tenant's usage is kept in
// counters spread by key, for the same reason. A quota's check reads them
// all, so far from a tenant's bound it relies on the count its process
// read up to ledger.Quota.MaxCountAge ago instead of reading them in
// every transaction, whose commit would then conflict with every other
// new request of the tenant.
//
// # Cost
//
// etcd buys availability, not write throughput: each read is a round trip
// and each commit a Raft round, so an idempotent write costs a few
// milliseconds where bbolt takes a few hundred microseconds (figures in
// bench/README.md). Keep etcd's auto-compaction on (every write is a
// revision) and keep transactions small.
//
// Package embedded runs a real cluster in process for demos and tests;
// etcdtest wraps it for go test.
package etcdkv

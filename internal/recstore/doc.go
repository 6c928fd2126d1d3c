// Package recstore keeps the records that are looked up by (scope, key) and
// written once per request: idempotency records and inbox marks. It has two
// layouts behind one interface, chosen by the backend:
//
//   - log (bbolt: one writer process). Records are appended to a bucket
//     whose keys grow with the record's expiry (the expiry second, then a
//     counter), so a batch's records share the tail leaf and the log is its
//     own expiry index. An in-memory directory, rebuilt when the store is
//     first used in a process, maps hash(scope, key) to log positions: a
//     look-up costs a map probe and, on a hit, one Get of the tail-ordered
//     key. This is Bitcask's key directory over an append-ordered log,
//     inside bbolt's transactions. Beside it, a bounded cache of the
//     entries this process committed last (recent.go) answers a retry
//     with no transaction at all (Cached). New entries go first to the
//     log's tail, a bucket of one leaf page at most, and move to the log
//     a page at a time at the same positions (tail.go): a transaction then
//     writes one page for its record instead of the log's whole tail path.
//     A kind that groups its records (Spec.Group: the ledger's tenants)
//     has them counted in memory too (tally.go), by the same rebuild.
//   - keyed (etcd: several writers). Records live under scope NUL key, with
//     a separate expiry index, and are looked up directly. This is also the
//     layout of files written before the log (format 1); Migrate moves them.
package recstore

// Package keyspace is the plumbing oncekv's packages share on top of the kv
// port: the reserved namespace of oncekv's own buckets, time indexes
// (expiry and due-time indexes), and the record-kind abstraction with its
// one generic sweeper and one generic record↔index checker.
//
// # The model
//
// Every bucket oncekv owns lives under a reserved prefix (Namespace), so
// a service's own buckets, in the same file, can never collide with them,
// and the CLI can list them (List). Raw gives the transaction under the
// kv guard that keeps a service's code out of that namespace. The format
// record (StampFormat, StoredFormat) says which layout the file holds, so
// a newer file is refused and an older one migrated, never misread.
//
// A TimeIndex orders keys by a time (an expiry, a due time) followed by
// the record's own key, so the records due first are the first keys:
// sweeps and reconcilers read what is due without scanning the rest. Kind
// ties a kind of record to its index: one generic sweeper (Due, Expire)
// that re-checks each record's state before removing it, and one generic
// checker that every record has its index entry and every entry its
// record. The packages describe their records (ledger, inbox, outbox,
// sideeffect); retention and the consistency check use them through
// kv.RecordKind. The default retentions and MaxRetention live here too,
// so that every package bounds times alike.
package keyspace

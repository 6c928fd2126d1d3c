// Package keyspace is the plumbing oncekv's packages share on top of the kv
// port: the reserved namespace of oncekv's own buckets, time indexes
// (expiry and due-time indexes), and the record-kind abstraction with its
// one generic sweeper and one generic record↔index checker.
//
// # The model
//
// Every bucket oncekv owns lives under a reserved prefix (Namespace), so
// a service's own buckets, in the same file, can never collide with them,
// and the CLI and the checks can find them all (List). kv.DB keeps a
// service's code out of that namespace; Raw reaches past that guard, for
// oncekv's own packages. The format record (StampFormat, StoredFormat)
// says which layout the file holds, so a newer file is refused and an
// older one migrated, never misread.
//
// A TimeIndex holds (time, record key) entries, the time first in an
// order bytes sort by, kept by the writers in the records' own
// transaction: a sweep or a scheduler reads only what is due, in time
// order, without scanning every record.
//
// Kind ties a kind of record to its index: one generic sweeper (Due,
// Expire) that re-checks each record before removing it and never deletes
// a corrupt one blindly, and one generic checker that every record
// decodes and has its index entry, and every entry its record. The packages describe their records (ledger, inbox, outbox,
// sideeffect); retention and the consistency check use them through
// kv.RecordKind. The default retentions and MaxRetention live here too,
// so that every package bounds times alike.
package keyspace

// Package kv is the storage layer under every oncekv package: it opens bbolt
// with safe defaults, defines the small transaction interface the rest of
// oncekv is written against, runs managed and group-committed transactions,
// reserves a namespace for oncekv's own buckets, and encodes records.
//
// # Opening
//
// Open takes a path and an *Options (nil means defaults). The file is created
// with mode 0600; a file locked by another process fails after
// Options.LockTimeout with a *LockedError instead of hanging; a file written
// by a newer oncekv format fails with a *FormatError and is left untouched.
//
//	db, err := kv.Open("app.db", nil)
//	if err != nil { ... }
//	defer db.Close()
//
// A service that already holds a *bbolt.DB calls Wrap instead, and hands its
// own *bbolt.Tx to any oncekv call through WrapTx:
//
//	err := boltDB.Update(func(btx *bbolt.Tx) error {
//		// the caller's own bbolt code ...
//		_, err := ledger.DoTx(ctx, kv.WrapTx(btx), req, work)
//		return err
//	})
//
// # Transactions
//
// Every oncekv operation comes in two forms: one that takes the caller's Tx
// and never commits, and a managed one that opens the transaction itself with
// Update, View or Batch. Update and View roll back when the function returns
// an error or panics.
//
// Batch is group commit: concurrent callers share one transaction and one
// fsync. There is no fixed delay by default: a batch starts as soon as the
// writer is idle, and callers that arrive during its commit form the next one.
// A function run under Batch may run more than once and must have no effect
// outside the transaction until Batch returns.
//
// # Namespace and records
//
// oncekv's buckets live at the top level under ReservedPrefix ("\x00oncekv/").
// A Tx refuses to create, open or delete those names, so an application's
// buckets cannot collide with them. A format record in the reserved meta
// bucket holds FormatVersion.
//
// Records are encoded with Encoder and read with Decoder: a magic byte, the
// record kind, a layout version, varint and length-prefixed fields, and a
// CRC-32C. A decoder never panics: truncated, bit-flipped or foreign input
// yields a *CorruptError. Large values (stored responses) are compressed with
// zstd above a threshold by Compress; Decompress bounds its output.
//
// # Caveats
//
//   - bbolt allows one process at a time to open a file for writing. Reading a
//     database held by a running service needs that service's cooperation
//     (the admin handler in later packages), not a second Open.
//   - Options.NoSync trades durability for speed; never use it in production.
//   - Code holding a raw *bbolt.Tx can reach the reserved buckets. It must not
//     modify them.
//   - Clock drives every time decision. With ManualClock in tests, nothing in
//     oncekv sleeps on wall time except explicit waits the caller asked for.
package kv

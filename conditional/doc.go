// Package conditional makes operations safe to repeat without an
// idempotency key, by writing them so that running them twice has the same
// effect as running them once. It offers the three patterns that do this in
// SQL, over typed tables of versioned rows in bbolt:
//
//   - Compare-and-set on a version ("UPDATE ... SET ..., version = version+1
//     WHERE id = $1 AND version = $2"): CompareAndSet writes only if the row
//     is still at the version the caller read. On a mismatch nothing is
//     written and the result carries the current row, so the caller can
//     decide (the "zero rows affected, read back" pattern).
//   - Upsert on a business identifier ("INSERT ... ON CONFLICT (tenant,
//     external_ref) DO NOTHING"): unique indexes are declared per table and
//     kept in index buckets in the same transaction as the row. Upsert
//     collapses a repeated create into the existing row, whatever ID the retry
//     carries; Insert reports a *UniqueViolationError naming the index and the
//     row that holds the key.
//   - Absolute assignment ("SET status = 'paid'"): Assign and AssignField set
//     a target state, optionally only at an expected version. Assigning the
//     state a row already has writes nothing, so a repeat is harmless.
//
// A relative change ("add 10") is not safe to repeat. Modify offers it as a
// compare-and-set loop with bounded retries, for use under an idempotency key.
//
// # Tables
//
//	orders, err := conditional.NewTable(db, "orders", &conditional.Options[Order]{
//		Indexes: []conditional.Index[Order]{{
//			Name: "by_ref",
//			Key: func(o Order) ([]byte, bool) { return conditional.Key(o.Tenant, o.ExternalRef), true },
//		}},
//	})
//
// Values are encoded with a Codec (JSON by default). Each row stores its
// version, its value and its key in every index, so updates and deletes move
// and remove index entries exactly, and the consistency check (kv.DB.Check,
// `oncekv check`) can verify every table without knowing its Go type.
// Table.Check adds the typed check that each stored key still matches the
// value's field.
//
// Every operation has a managed form that runs under group commit and a Tx
// form that works inside the caller's transaction, so a conditional write can
// share one transaction with an idempotency record (ledger.DoTx) or an
// outbox event.
//
// Rows are read one at a time (Get, GetByIndex), all of them (All), or in
// a range of IDs (Range): give rows that are read together (a customer's
// orders) IDs that begin alike, and read them with Range. On etcd a write
// transaction's commit compares what it read, and Range reads the range
// alone, so that the rows other transactions insert past it do not refuse
// the commit.
//
// # Caveats
//
//   - Indexes are unique. A non-unique lookup needs a key that includes the
//     primary key.
//   - An index key is 1 to MaxIndexKeyLen bytes. A value whose Key function
//     gives it an empty or longer key is refused (ErrInvalidIndexKey) before
//     anything is written; return ok=false to leave a row out of an index.
//   - Changing an index's Key function does not re-index existing rows; the
//     typed Check reports rows whose stored key no longer matches.
//   - Functions passed to managed calls (UpdateFunc, AssignField's set) may
//     run more than once; they must only compute, not act.
//   - Codecs must be deterministic: Assign compares encodings to decide
//     whether anything changed. encoding/json is (for structs and maps).
//   - Options.Seal stores a table's values sealed with the database's key
//     ring (package seal), bound to table and row; IDs, versions and index
//     keys stay clear, so secrets must not go into index keys.
package conditional

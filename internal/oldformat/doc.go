// Package oldformat writes databases the way earlier oncekv formats did, so
// tests can prove that a file written by older code is migrated, never
// misread.
//
// # The model
//
// WriteFormat1 writes format 1: idempotency records and inbox marks under
// scope NUL key, with expiry indexes, as oncekv kept them before the
// record log. It writes through a kv.DB over another kv.DB, which the
// record store does not take for bbolt and so keeps in that keyed layout,
// byte for byte as the old code did, then sets the format record back to
// 1. WriteFormat2 writes format 2: the record log without its tail, the
// tails' entries moved to the logs at the same positions, and the format
// set back to 2. The migration tests (ledger, the CLI's migrate, the
// crash suite's TestCrashDuringMigration) open such files with today's
// code and check that every record reads back as written, and that a
// process killed in the middle of a migration leaves a file the next open
// finishes migrating.
package oldformat

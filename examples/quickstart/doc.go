// Command quickstart shows oncekv's two idempotency paths on an embedded
// database: a create-order request retried three times (single-transaction
// path), and a pay request whose worker "crashes" after charging and is
// taken over after its lease (two-phase path).
//
//	go run ./examples/quickstart
package main

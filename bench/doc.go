// Package bench holds oncekv's benchmarks: what each guarantee costs on the
// hot path, measured against bare bbolt doing the same business write in the
// same run, so the ratio survives a noisy machine.
//
// Run them with
//
//	go test ./bench -run '^$' -bench . -benchtime 20000x
//
// Each paired benchmark interleaves the two sides operation by operation
// (bare, then oncekv, then bare...), each against its own database file of
// the same shape, and reports both per-operation times and their ratio as
// custom metrics (bare-ns/op, oncekv-ns/op, ratio). See bench/README.md for
// the method and recorded results.
package bench

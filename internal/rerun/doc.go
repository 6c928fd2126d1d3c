// Package rerun switches on, for a test build, the reruns a backend with
// several writers makes now and then: etcd runs a write transaction's
// function again after an optimistic conflict, and a read's after a read
// that failed in a way worth another attempt. A function that keeps what a
// first run did (a counter outside the transaction, an attempt counted
// from a struct it was handed, a slice it appends to) is wrong there, and
// only there, and only now and then.
//
// Built with -tags oncekv_rerun, every transaction on a bbolt file runs its
// function twice: a write once in a transaction it rolls back and again in
// one it commits, a read twice in read transactions of its own (package
// kv's bbolt backend asks Enabled, and turns Options.CheckNesting on for
// every database, however a test opened it). Every library suite passes
// in that build (make rerun, and CI): the deterministic counterpart of the
// etcd matrix, whose conflicts are rare in tests. In a normal build Enabled is
// false and the compiler removes the branches that ask it.
//
// Tests that count bbolt's own transactions, or that pin what one run
// does, skip in that build (kvtest.RequireOneRun).
package rerun

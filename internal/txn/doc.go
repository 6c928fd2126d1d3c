// Package txn holds the small generic helpers behind oncekv's two-form API:
// every call X(ctx, ...) is its XTx(tx, ...) form run in a transaction the
// call opens itself.
//
// # The model
//
// The XTx form does the work inside a transaction the caller owns (its
// own business writes in the same commit); the X form opens one: Batch
// (group commit) for writes, View for reads. Run returns the function's
// result from the run that committed, since under group commit a
// function may run more than once. Rejecting turns the outcomes that wrote
// nothing (a mismatch, a key in use, a lost lease) into kv.Reject, so one
// request's refusal does not roll back and re-run the other requests of
// its batch. Keeping these in one place keeps every package's X forms
// alike.
package txn

package kv

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrNestedTx is returned by Update and Batch when their context says the
// caller already runs inside a write transaction of the same database
// (WithinTx): an idemhttp handler that calls a managed call (a ledger.Do,
// a conditional.Table.Upsert) or Update with r.Context(). With
// Options.CheckNesting it is returned whatever the context, when the call
// comes from the goroutine that runs the transaction's function. bbolt
// has one writer, and the caller's own transaction holds it: the nested
// call would wait for it for ever, and every other write of the process
// with it. Write through the transaction the caller has (idemhttp.Tx, the
// Tx forms: DoTx, UpsertTx, AddTx...).
var ErrNestedTx = errors.New("kv: a write transaction started inside a write transaction of the same database (it would wait for the one its caller holds, for ever): write through the transaction you have (idemhttp.Tx, the ...Tx forms)")

// InTx is a context marked as running inside a write transaction of a
// database (DB.WithinTx), until End.
type InTx struct {
	context.Context
	db     *DB
	parent *InTx // the mark it was derived under, if any
	done   atomic.Bool
}

type inTxKey struct{}

// Value returns the mark for its own key, and the parent's values for the
// others.
func (c *InTx) Value(key any) any {
	if key == (inTxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// End ends the mark: call it when the transaction's function returns.
func (c *InTx) End() { c.done.Store(true) }

// Resume marks the context again, until the next End: for a context handed
// out before the transaction that runs code with it (idemhttp gives an
// external route's handler such a context, ended, and resumes it while
// the handler's Respond runs inside Perform's finishing transaction).
func (c *InTx) Resume() { c.done.Store(false) }

// WithinTx returns ctx marked as running inside a write transaction of
// db, until its End. Until then, Update and Batch of db given it, or a
// context derived from it, return ErrNestedTx at once instead of waiting
// for a writer their caller holds. Code that hands a context to functions
// it runs inside its transaction marks it (idemhttp marks each request's
// context while its handler runs):
//
//	ctx := db.WithinTx(ctx)
//	defer ctx.End()
func (db *DB) WithinTx(ctx context.Context) *InTx {
	parent, _ := ctx.Value(inTxKey{}).(*InTx)
	return &InTx{Context: ctx, db: db, parent: parent}
}

// nested reports whether ctx is marked as inside a write transaction of
// db that has not ended.
func (db *DB) nested(ctx context.Context) bool {
	c, _ := ctx.Value(inTxKey{}).(*InTx)
	for ; c != nil; c = c.parent {
		if c.db == db && !c.done.Load() {
			return true
		}
	}
	return false
}

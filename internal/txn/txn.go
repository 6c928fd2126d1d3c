package txn

import (
	"context"

	"github.com/oncekv/oncekv/kv"
)

// Runner opens a managed transaction: kv.DB's Batch, Update or View, or a
// wrapper of one (Rejecting).
type Runner func(ctx context.Context, fn func(kv.Tx) error) error

// Run runs fn in the transaction run opens and returns fn's result. Under
// Batch fn may run more than once; the result of the run that committed is
// the one returned.
func Run[T any](ctx context.Context, run Runner, fn func(kv.Tx) (T, error)) (T, error) {
	var out T
	err := run(ctx, func(tx kv.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}

// Rejecting returns run with the errors rejected reports passed through
// kv.Reject: outcomes decided without writing anything (a mismatch, a key in
// use, a lost lease) do not fail a group commit, which would re-run every
// other call in it.
func Rejecting(run Runner, rejected func(error) bool) Runner {
	return func(ctx context.Context, fn func(kv.Tx) error) error {
		return run(ctx, func(tx kv.Tx) error {
			err := fn(tx)
			if err != nil && rejected(err) {
				return kv.Reject(err)
			}
			return err
		})
	}
}

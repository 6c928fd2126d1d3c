package looptest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
)

// EndsWhenClosed starts run (a loop's Run over db, polling often, which
// passes each pass's error to onPass) and requires that a first pass
// succeeds, and that once db is closed run returns kv.ErrClosed, within a
// generous bound, after onPass has had it.
func EndsWhenClosed(t *testing.T, db *kv.DB, run func(ctx context.Context, onPass func(error)) error) {
	t.Helper()
	passes := make(chan error, 100)
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), func(err error) {
			select {
			case passes <- err:
			default:
			}
		})
	}()
	require.NoError(t, <-passes, "a pass over the open database")
	require.NoError(t, db.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, kv.ErrClosed)
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on after the database closed")
	}
	var last error
	for len(passes) > 0 {
		last = <-passes
	}
	require.ErrorIs(t, last, kv.ErrClosed, "the pass callback had the error")
}

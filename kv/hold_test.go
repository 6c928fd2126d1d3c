package kv_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/observe"
)

// Hold reads with the writer held and commits nothing: a write made in it
// is rolled back, the Observer hears of no commit (an Update does), and
// fn's error is Hold's.
func TestHoldCommitsNothing(t *testing.T) {
	var commits []observe.Commit
	db := kvtest.Open(t, &kv.Options{Observer: &observe.Observer{Commit: func(c observe.Commit) { commits = append(commits, c) }}})
	require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		return b.Put([]byte("o1"), []byte("paid"))
	}))
	require.Len(t, commits, 1)

	var seen []byte
	require.NoError(t, db.Hold(ctx, func(tx kv.Tx) error {
		seen = append([]byte(nil), tx.Bucket([]byte("orders")).Get([]byte("o1"))...)
		return tx.Bucket([]byte("orders")).Put([]byte("o2"), []byte("not kept"))
	}))
	require.Equal(t, "paid", string(seen))
	require.Len(t, commits, 1, "no commit reported")
	require.NoError(t, db.View(ctx, func(tx kv.Tx) error {
		require.Nil(t, tx.Bucket([]byte("orders")).Get([]byte("o2")), "rolled back")
		return nil
	}))

	boom := errors.New("boom")
	require.ErrorIs(t, db.Hold(ctx, func(kv.Tx) error { return boom }), boom)
	require.Len(t, commits, 1)
}

package kv_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// A commit's handlers (Tx.OnCommit) run once it is on the disk, and one
// may read: its View sees the commit at once, and does not wait for the
// end of the Commit that runs the handler (readers wait for a commit
// whose sync is under way).
func TestAViewInACommitHandlerSeesTheCommit(t *testing.T) {
	db := kvtest.OpenPath(t, filepath.Join(t.TempDir(), "orders.db"), nil)
	kvtest.RequireBolt(t, db)
	var seen string // set before done is sent (the rerun build reads twice)
	done := make(chan error, 1)
	go func() {
		done <- db.Update(ctx, func(tx kv.Tx) error {
			tx.OnCommit(func() {
				_ = db.View(ctx, func(tx kv.Tx) error {
					seen = string(tx.Bucket([]byte("orders")).Get([]byte("o-1")))
					return nil
				})
			})
			b, err := tx.CreateBucketIfNotExists([]byte("orders"))
			if err != nil {
				return err
			}
			return b.Put([]byte("o-1"), []byte("paid"))
		})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the Update whose commit handler reads never returned")
	}
	require.Equal(t, "paid", seen)
}

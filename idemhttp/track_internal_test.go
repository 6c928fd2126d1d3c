package idemhttp

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
)

// ranger is a bbolt bucket that bounds its cursors itself (kv.Ranger), as
// etcd's do, counting the calls.
type ranger struct {
	kv.Bucket
	calls *int
}

func (r ranger) RangeCursor(lo, hi []byte) kv.Cursor {
	*r.calls++
	return kv.RangeCursor(r.Bucket, lo, hi)
}

// A handler's kv.RangeCursor over a bucket of its transaction reaches the
// backend's own bounded cursor through the write tracking (on etcd, what
// its commit compares), sees the range alone, and counts as no write.
func TestTrackedBucketPassesRangeCursorsOn(t *testing.T) {
	t.Parallel()
	kvtest.RequireLocal(t, "the tracking over a bbolt bucket that bounds its cursors")
	db, err := kv.Open(filepath.Join(t.TempDir(), "t.db"), &kv.Options{NoSync: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Update(context.Background(), func(tx kv.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("orders"))
		if err != nil {
			return err
		}
		for _, k := range []string{"a/1", "b/1", "b/2", "c/1"} {
			if err := b.Put([]byte(k), []byte("{}")); err != nil {
				return err
			}
		}
		calls, wrote := 0, false
		tracked := trackedBucket{ranger{b, &calls}, &wrote}
		var keys []string
		c := kv.RangeCursor(tracked, []byte("b/"), []byte("b0"))
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			keys = append(keys, string(k))
		}
		require.Equal(t, []string{"b/1", "b/2"}, keys)
		require.Equal(t, 1, calls, "the bucket's own RangeCursor")
		require.False(t, wrote, "a scan is no write")
		return nil
	}))
}

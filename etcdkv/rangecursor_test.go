package etcdkv_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// A transaction that scans a range through kv.RangeCursor is compared at
// its commit on that range alone: a write by another transaction just
// past it, or before it, does not refuse the commit, while a write into it
// does. The same scan through Bucket.Cursor, stopped at the range's end by
// its caller, had read (and compared) every key to the end of the bucket:
// a quota's exact check, scanning one tenant's usage counters, conflicted
// with every tenant that sorts after it.
func TestRangeCursorComparesItsRangeAlone(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	ctx := context.Background()
	for i, tc := range []struct {
		name     string
		bounded  bool
		other    string // the key the other transaction writes between the scan and the commit
		attempts uint64 // the scanning transaction's runs
	}{
		{"bounded, a write after the range", true, "n-1", 1},
		{"bounded, a write before the range", true, "l-1", 1},
		{"bounded, a write at the range's end", true, "n", 1},
		{"bounded, a write into the range", true, "m-9", 2},
		{"unbounded, a write after the range", false, "n-1", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := etcdkv.Open(c.Endpoints(), &etcdkv.Options{Prefix: fmt.Sprintf("/range/%d/", i)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			put := func(key string) error {
				return b.Update(ctx, func(tx kv.Tx) error {
					bk, err := tx.CreateBucketIfNotExists([]byte("b"))
					if err != nil {
						return err
					}
					return bk.Put([]byte(key), []byte("x"))
				})
			}
			for _, k := range []string{"l-0", "m-0", "m-1", "n-0"} {
				if err := put(k); err != nil {
					t.Fatal(err)
				}
			}
			before := b.Stats()
			var attempts uint64
			err = b.Update(ctx, func(tx kv.Tx) error {
				attempts++
				bk := tx.Bucket([]byte("b"))
				var cur kv.Cursor
				if tc.bounded {
					cur = kv.RangeCursor(bk, []byte("m"), []byte("n"))
				} else {
					cur = bk.Cursor()
				}
				n := 0
				for k, _ := cur.Seek([]byte("m")); k != nil && k[0] == 'm'; k, _ = cur.Next() {
					n++
				}
				if attempts == 1 {
					if err := put(tc.other); err != nil {
						return err
					}
				}
				return bk.Put([]byte("count"), fmt.Appendf(nil, "%d", n))
			})
			if err != nil {
				t.Fatal(err)
			}
			conflicts := b.Stats().Conflicts - before.Conflicts
			if attempts != tc.attempts || conflicts != tc.attempts-1 {
				t.Errorf("the scanning transaction ran %d times (%d conflicts), want %d", attempts, conflicts, tc.attempts)
			}
		})
	}
}

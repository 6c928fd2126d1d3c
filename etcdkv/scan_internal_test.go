package etcdkv

import (
	"context"
	"fmt"
	"testing"

	"github.com/oncekv/oncekv/etcdkv/etcdtest"
	"github.com/oncekv/oncekv/kv"
)

// A read-only transaction that scans a bucket holds the cursor's page,
// not every value it passed: a View over a queue of a million events (the
// relay's, a listing, a check) kept them all until it ended. A writable
// one keeps what its commit compares. Both read every value right.
func TestScanHoldsAPageInAView(t *testing.T) {
	t.Parallel()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b, err := Open(c.Endpoints(), &Options{Prefix: "/scan/"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	n := 5 * cursorPage
	for i := 0; i < n; i += 100 {
		if err := b.Update(ctx, func(tx kv.Tx) error {
			bk, err := tx.CreateBucketIfNotExists([]byte("q"))
			if err != nil {
				return err
			}
			for j := i; j < min(i+100, n); j++ {
				if err := bk.Put(fmt.Appendf(nil, "k%05d", j), fmt.Appendf(nil, "v%05d", j)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	scan := func(tx kv.Tx) (int, error) {
		seen := 0
		cur := tx.Bucket([]byte("q")).Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			if want := fmt.Sprintf("v%05d", seen); string(k) != fmt.Sprintf("k%05d", seen) || string(v) != want {
				return seen, fmt.Errorf("entry %d: %q = %q", seen, k, v)
			}
			seen++
		}
		// And backwards, through the pages again.
		back := 0
		for k, v := cur.Last(); k != nil; k, v = cur.Prev() {
			if string(v) != "v"+string(k[1:]) {
				return seen, fmt.Errorf("backwards: %q = %q", k, v)
			}
			back++
		}
		if back != seen {
			return seen, fmt.Errorf("%d forwards, %d backwards", seen, back)
		}
		return seen, nil
	}
	if err := b.View(ctx, func(ktx kv.Tx) error {
		seen, err := scan(ktx)
		if err != nil || seen != n {
			return fmt.Errorf("view saw %d of %d: %v", seen, n, err)
		}
		inner := ktx.(*tx)
		if len(inner.cache) != 0 || len(inner.spans) != 0 {
			t.Errorf("a view holds %d values and %d ranges after its scan; want none", len(inner.cache), len(inner.spans))
		}
		if len(inner.reads) != 0 {
			t.Errorf("a view's scan read %d values one at a time; want every value from its page", len(inner.reads))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, func(ktx kv.Tx) error {
		seen, err := scan(ktx)
		if err != nil || seen != n {
			return fmt.Errorf("update saw %d of %d: %v", seen, n, err)
		}
		if inner := ktx.(*tx); len(inner.cache) != n {
			t.Errorf("an update keeps %d values of its scan; want %d (covered by its ranges)", len(inner.cache), n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

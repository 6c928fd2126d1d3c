package inspect_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
)

// Stats while the service's writes grow the file: bbolt then remaps it, and
// a read of its memory map outside a transaction (bbolt's DB.Info, which
// Stats called for the page size) raced the remap. CI's browser test
// crashed on it ("unexpected fault address" in DB.Info, from the console's
// overview under load); under -race this test reports the race on the old
// code.
func TestStatsWhileTheFileGrows(t *testing.T) {
	t.Parallel()
	db, _, _ := fixture(t)
	in := must(inspect.New(db))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, err := in.Stats(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			if st.PageSize == 0 {
				t.Error("Stats reported no page size")
				return
			}
		}
	})
	value := make([]byte, 64<<10)
	for i := range 256 { // 16 MiB: the map grows (and moves) several times
		require.NoError(t, db.Update(ctx, func(tx kv.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("growth"))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "k%04d", i), value)
		}))
	}
	close(stop)
	wg.Wait()
}

package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// BenchmarkBackup measures kv.DB.BackupFile on a file of about 500 MB
// while one writer commits durable writes, against that writer alone for
// as long in the same run: the copy's speed (MB/s) and what it does to
// the writes (their p99 and longest wait, during the copy and without
// it). The copy is paced (a sync every atomicfile.PaceBytes), so that the
// file system's journal commits, which the writer's fsyncs wait for,
// never have a whole copy's dirty pages to write.
//
//	go test ./bench -run '^$' -bench Backup -benchtime 3x
func BenchmarkBackup(b *testing.B) {
	db := openDB(b, "backup", nil)
	val := make([]byte, 1000)
	if err := fill(ctx, db, 256<<10, func(tx kv.Tx, i int) error {
		bk, err := tx.CreateBucketIfNotExists([]byte("rows"))
		if err != nil {
			return err
		}
		return bk.Put(key("row", i), val)
	}); err != nil {
		b.Fatal(err)
	}
	// writes commits one durable row at a time until stop, and returns
	// every commit's time.
	writes := func(stop *atomic.Bool, from int) []time.Duration {
		var lat []time.Duration
		for i := from; !stop.Load(); i++ {
			start := time.Now()
			if err := db.Update(ctx, func(tx kv.Tx) error { return tx.Bucket([]byte("rows")).Put(key("new", i), val) }); err != nil {
				b.Error(err)
				return lat
			}
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	ms := func(lat []time.Duration, q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / 1e6
	}
	var during, alone []time.Duration
	var bytes int64
	var copying time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var stop atomic.Bool
		done := make(chan []time.Duration, 1)
		go func() { done <- writes(&stop, i<<20) }()
		start := time.Now()
		n, err := db.BackupFile(ctx, filepath.Join(b.TempDir(), fmt.Sprintf("copy%d.db", i)))
		took := time.Since(start)
		stop.Store(true)
		during = append(during, <-done...)
		if err != nil {
			b.Fatal(err)
		}
		bytes, copying = bytes+n, copying+took

		b.StopTimer()
		stop.Store(false)
		go func() { done <- writes(&stop, i<<20+1<<19) }()
		time.Sleep(took) // the writer alone, as long as the copy took
		stop.Store(true)
		alone = append(alone, <-done...)
		b.StartTimer()
	}
	b.ReportMetric(float64(bytes)/1e6/copying.Seconds(), "MB/s")
	b.ReportMetric(ms(during, 0.99), "write-p99-ms")
	b.ReportMetric(ms(during, 1), "write-max-ms")
	b.ReportMetric(ms(alone, 0.99), "alone-write-p99-ms")
	b.ReportMetric(ms(alone, 1), "alone-write-max-ms")
}

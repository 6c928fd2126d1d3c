package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/kv/kvtest"
	"github.com/oncekv/oncekv/ledger"
	"github.com/oncekv/oncekv/retention"
)

// fillLedger writes n completed idempotency records with keys prefix-i, in
// transactions of 10,000.
func fillLedger(b *testing.B, l *ledger.Ledger, prefix string, n int) {
	for i := 0; i < n; i += 10000 {
		err := l.DB().Update(ctx, func(tx kv.Tx) error {
			for j := i; j < min(i+10000, n); j++ {
				_, err := l.DoTx(ctx, tx, ledger.Request{Scope: "acme|POST /v1/orders", Key: prefix + string(key("", j)), Fingerprint: ledger.Fingerprint{1}},
					func(kv.Tx) (ledger.Response, error) { return ledger.Response{Status: 201, Body: responseBody}, nil })
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweep10k measures sweeping 10,000 expired records that sit among
// 100,000 and among 1,000,000 live ones: the cost follows what expired, not
// the size of the database, so the two should be close.
func BenchmarkSweep10k(b *testing.B) {
	for _, live := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("live=%d", live), func(b *testing.B) {
			clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
			db := openDB(b, "sweep", &kv.Options{NoSync: true, Clock: clock})
			l, err := ledger.New(db, &ledger.Config{RetentionFor: func(scope string) time.Duration { return time.Hour }})
			if err != nil {
				b.Fatal(err)
			}
			long, _ := ledger.New(db, &ledger.Config{Retention: 365 * 24 * time.Hour})
			fillLedger(b, long, "live", live)
			var longest time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				fillLedger(b, l, fmt.Sprintf("exp%d-", i), 10_000)
				clock.Advance(2 * time.Hour)
				b.StartTimer()
				st, err := retention.Sweep(ctx, db, &retention.Config{Pause: -1}, inspect.RecordKinds()...)
				if err != nil || st.Deleted() != 10_000 {
					b.Fatalf("deleted %d: %v", st.Deleted(), err)
				}
				longest = max(longest, st.LongestTx())
			}
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-tx-ms")
		})
	}
}

// BenchmarkSweepMillion sweeps 1,000,000 expired idempotency records among
// 1,000,000 live ones and reports the longest write transaction. It builds
// a ~700 MB file, so it runs only with ONCEKV_BENCH_BIG=1:
//
//	ONCEKV_BENCH_BIG=1 go test ./bench -run '^$' -bench SweepMillion -benchtime 1x -timeout 30m
func BenchmarkSweepMillion(b *testing.B) {
	if os.Getenv("ONCEKV_BENCH_BIG") == "" {
		b.Skip("set ONCEKV_BENCH_BIG=1 to build the 2M-record database")
	}
	clock := kvtest.NewManualClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	db := openDB(b, "million", &kv.Options{NoSync: true, Clock: clock})
	short, _ := ledger.New(db, &ledger.Config{Retention: time.Hour})
	long, _ := ledger.New(db, &ledger.Config{Retention: 365 * 24 * time.Hour})
	fillLedger(b, short, "exp", 1_000_000)
	fillLedger(b, long, "live", 1_000_000)
	clock.Advance(2 * time.Hour)
	b.ResetTimer()
	st, err := retention.Sweep(ctx, db, nil, inspect.RecordKinds()...)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	ks := st.Kinds[retention.Idempotency]
	if ks.Deleted != 1_000_000 {
		b.Fatalf("deleted %d", ks.Deleted)
	}
	var liveLeft int
	_ = db.View(ctx, func(tx kv.Tx) error {
		for range long.Records(tx, ledger.ListOptions{IncludeExpired: true}) {
			liveLeft++
		}
		return nil
	})
	if liveLeft != 1_000_000 {
		b.Fatalf("live records left: %d", liveLeft)
	}
	b.ReportMetric(float64(ks.Deleted), "deleted")
	b.ReportMetric(float64(ks.Batches), "batches")
	b.ReportMetric(float64(ks.LongestTx.Microseconds())/1000, "longest-tx-ms")
	b.ReportMetric(st.Duration.Seconds(), "sweep-s")
}

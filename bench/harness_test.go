package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkGroupCommit runs the durable load harness at several client
// counts, oncekv's group commit against the same bare write through the
// same group commit, and reports both throughputs and their ratio.
func BenchmarkGroupCommit(b *testing.B) {
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			var rep Report
			for range b.N {
				var err error
				rep, err = RunHarness(context.Background(), HarnessConfig{Duration: 2 * time.Second, Clients: clients,
					PayloadBytes: 200, ResponseSize: 100, Sync: true, Commit: "batch"})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(rep.Get("bare").OpsPerSec, "bare-ops/s")
			b.ReportMetric(rep.Get("oncekv").OpsPerSec, "oncekv-ops/s")
			b.ReportMetric(rep.Ratio(), "ratio")
			b.ReportMetric(rep.Get("oncekv").P99us, "oncekv-p99-us")
		})
	}
}

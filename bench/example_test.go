package bench_test

import (
	"context"
	"fmt"
	"time"

	"github.com/oncekv/oncekv/bench"
)

// RunHarness is what `oncekv bench` runs: the bare write and the same
// write through the ledger (and the comparisons asked for, here the
// floor) on files with identical settings, in alternating rounds, each
// reported with its ratio to the bare one. A real measurement runs for
// seconds per workload, durable (Sync), with rows preloaded.
func ExampleRunHarness() {
	rep, err := bench.RunHarness(context.Background(), bench.HarnessConfig{
		Duration: 200 * time.Millisecond, Clients: 4, PayloadBytes: 200, ResponseSize: 100,
		Commit: "batch", Floor: true,
	})
	if err != nil {
		panic(err)
	}
	for _, r := range rep.Results {
		fmt.Println(r.Name, r.Ops > 0, r.RatioToBare > 0)
	}
	// Output:
	// bare true true
	// oncekv true true
	// floor true true
}

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/bench"
)

// What go test -bench printed for two runs of the single-write pair, its
// floor and the directory's heap (with the lines around them that are not
// results).
const benchOutput = `goos: linux
goarch: amd64
pkg: github.com/oncekv/oncekv/bench
cpu: AMD EPYC
BenchmarkFloorSingleTx-2   	   20000	     45466 ns/op	     17338 bare-ns/op	     22546 oncekv-ns/op	         1.300 ratio	      5.000 bare-pages/op
BenchmarkFloorSingleTx-2   	   20000	     44210 ns/op	     17100 bare-ns/op	     21888 oncekv-ns/op	         1.280 ratio	      5.000 bare-pages/op
BenchmarkSingleTx-2        	   20000	     50012 ns/op	     17300 bare-ns/op	     26123 oncekv-ns/op	         1.510 ratio	    4409 B/op	      64 allocs/op
BenchmarkSingleTx-2        	   20000	     51022 ns/op	     17200 bare-ns/op	     26660 oncekv-ns/op	         1.550 ratio	    4409 B/op	      64 allocs/op
BenchmarkMiddleware/durable=true/clients=16-2        	    4000	    292182 ns/op	         1.198 ratio
BenchmarkFloorMiddleware/durable=true/clients=16-2   	    4000	    263249 ns/op	         1.084 ratio
BenchmarkOpen/records=1000000/after=close-2         	       5	 601234567 ns/op	       360.0 rebuild-ms
BenchmarkOpen/records=1000000/after=crash-2         	       5	1130000000 ns/op	       160.0 rebuild-ms
BenchmarkDirectoryHeap/via=add-2         	       1	2000000000 ns/op	        37.82 heap-B/record
--- BENCH: BenchmarkSomething-2
    a_test.go:12: Benchmark results follow 1 2
PASS
ok  	github.com/oncekv/oncekv/bench	12.3s
`

const sweepOutput = `{"cpus":2,"runs":[
 {"clients":1,"results":[{"name":"bare","ops_per_sec":1000,"ratio_to_bare":1},{"name":"oncekv","ops_per_sec":910,"ratio_to_bare":0.91,"ratio_min":0.88,"ratio_max":0.96},{"name":"floor","ratio_to_bare":0.86}]},
 {"clients":16,"results":[{"name":"bare","ratio_to_bare":1},{"name":"oncekv","ratio_to_bare":0.84,"ratio_min":0.77,"ratio_max":0.93},{"name":"floor","ratio_to_bare":0.90}]},
 {"clients":64,"results":[{"name":"bare","ratio_to_bare":1},{"name":"oncekv","ops_per_sec":18200,"ratio_to_bare":0.83,"ratio_min":0.83,"ratio_max":0.84},{"name":"floor","ratio_to_bare":0.88}]}]}`

func TestBenchmarkLinesAreReadByNameAndUnit(t *testing.T) {
	var b benchmarks
	require.NoError(t, b.add([]byte(benchOutput)))
	require.Equal(t, []float64{1.51, 1.55}, b.values("BenchmarkSingleTx", "ratio"))
	require.Equal(t, []float64{1.30, 1.28}, b.values("BenchmarkFloorSingleTx", "ratio"))
	require.Equal(t, []float64{64, 64}, b.values("BenchmarkSingleTx", "allocs/op"))
	require.Equal(t, []float64{1.198}, b.values("BenchmarkMiddleware/durable=true/clients=16", "ratio"))
	require.Equal(t, []float64{601234567}, b.values("BenchmarkOpen/records=1000000/after=close", "ns/op"))
	require.Nil(t, b.values("BenchmarkSomething", "ratio"), "a BENCH log line is not a result")
	require.Nil(t, b.values("BenchmarkSingleTx", "no-such-unit"))
	require.Len(t, b, 7)

	// A second step's output adds its runs.
	require.NoError(t, b.add([]byte("BenchmarkSingleTx-2 20000 50000 ns/op 1.60 ratio\n")))
	require.Equal(t, []float64{1.51, 1.55, 1.60}, b.values("BenchmarkSingleTx", "ratio"))

	require.Error(t, b.add([]byte("BenchmarkSingleTx-2 20000 fifty ns/op\n")), "a value that is not a number")
}

func TestGoalsTable(t *testing.T) {
	sweep, err := parseSweep([]byte(sweepOutput))
	require.NoError(t, err)
	m := measured{sweeps: []map[int][]bench.Result{sweep}, preload: "200000"}
	require.NoError(t, m.benchmarks.add([]byte(benchOutput)))

	var out bytes.Buffer
	writeTable(&out, m.goals(1_000_000))
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[2:] {
		cells := strings.Split(line, " | ")
		rows[strings.TrimPrefix(cells[0], "| ")] = strings.Join(cells[1:], " | ")
	}
	require.Equal(t, map[string]string{
		"throughput against bare, 64 clients, durable, 200000 rows preloaded": "≥ 0.90 | 0.83 (rounds 0.83–0.84) | 0.88 | missed (the floor misses it too) |",
		"oncekv's throughput, 64 clients":                                     "≥ 10,000 ops/s | 18200 ops/s | — | met |",
		"throughput against bare, 16 clients, durable, 200000 rows preloaded": "≥ 0.85 | 0.84 (rounds 0.77–0.93) | 0.90 | missed |",
		"throughput against bare, 1 client, durable, 200000 rows preloaded":   "≥ 0.85 | 0.91 (rounds 0.88–0.96) | 0.86 | met |",
		"`BenchmarkSingleTx` (NoSync, one write a transaction)":               "≤ 1.25x | 1.51x / 1.55x | 1.30x / 1.28x | missed (the floor misses it too) |",
		"`BenchmarkReplayHit`":                          "≤ 1.25x | — | — | not measured |",
		"middleware, durable, 1 client":                 "≤ 1.10x | — | — | not measured |",
		"middleware, durable, 16 clients":               "≤ 1.10x | 1.20x | 1.08x | missed |",
		"open with 1000000 live records, after a close": "≤ 1 s | 0.60 s | — | met |",
		"open with 1000000 live records, after a crash": "≤ 1 s | 1.13 s | — | missed |",
		"the key directory's heap per live record (1M)": "≤ 40 bytes | 37.8 B | — | met |",
	}, rows)

	// A second run: every run's figure, the spread of all their rounds,
	// the verdict on their mean.
	second, err := parseSweep([]byte(strings.NewReplacer(`"ratio_to_bare":0.83,"ratio_min":0.83,"ratio_max":0.84`, `"ratio_to_bare":0.99,"ratio_min":0.95,"ratio_max":1.01`,
		`"ratio_to_bare":0.88}`, `"ratio_to_bare":0.93}`).Replace(sweepOutput)))
	require.NoError(t, err)
	m.sweeps = append(m.sweeps, second)
	out.Reset()
	writeTable(&out, m.goals(1_000_000))
	require.Contains(t, out.String(), "| throughput against bare, 64 clients, durable, 200000 rows preloaded | ≥ 0.90 | 0.83 / 0.99 (rounds 0.83–1.01) | 0.88 / 0.93 | met |")
	require.Contains(t, out.String(), "| oncekv's throughput, 64 clients | ≥ 10,000 ops/s | 18200 ops/s / 18200 ops/s | — | met |")
	m.sweeps = m.sweeps[:1]

	// An open of another size is shown without a verdict.
	out.Reset()
	writeTable(&out, m.goals(100_000))
	require.Contains(t, out.String(), "| open with 100000 live records, after a close | (the goal is for 1M) | — | — | not measured |")
	out.Reset()
	require.NoError(t, m.benchmarks.add([]byte("BenchmarkOpen/records=100000/after=close-2 20 80000000 ns/op\n")))
	writeTable(&out, m.goals(100_000))
	require.Contains(t, out.String(), "| open with 100000 live records, after a close | (the goal is for 1M) | 0.08 s | — |  |")
}

func TestSweepOutputMustHoldRuns(t *testing.T) {
	_, err := parseSweep([]byte(`{"runs":[]}`))
	require.ErrorContains(t, err, "no runs")
	_, err = parseSweep([]byte(`64 clients`))
	require.ErrorContains(t, err, "reading oncekv bench --json")
}

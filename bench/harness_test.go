package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/ledger"
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

// The floor workload writes what it claims: per operation, the business
// row and one entry, in its second bucket, exactly as large as the log
// entry the ledger stores for the same request (read from a ledger file).
func TestFloorWorkload(t *testing.T) {
	dir := t.TempDir()
	cfg := HarnessConfig{ResponseSize: 100}
	open := func(name string) (*kv.DB, error) {
		return kv.Open(filepath.Join(dir, name+".db"), &kv.Options{NoSync: true})
	}
	ctx := context.Background()
	w, err := FloorWorkload(ctx, "floor", cfg, open)
	require.NoError(t, err)
	payload := make([]byte, 200)
	require.NoError(t, w.Preload(ctx, 50, payload))
	for i := range 10 {
		require.NoError(t, w.Op(ctx, fmt.Appendf(nil, "op-%d", i), payload, nil))
	}
	require.NoError(t, w.Close())

	// The ledger's own entry for the same request, read raw.
	ldb, err := open("ledger")
	require.NoError(t, err)
	defer ldb.Close()
	want, err := storedEntrySize(ctx, ldb, ledger.Request{Scope: "bench|POST /v1/orders", Key: fmt.Sprintf("%x", preloadKey(1)), Fingerprint: ledger.Fingerprint{1}},
		ledger.Response{Status: 201, Body: make([]byte, cfg.ResponseSize)})
	require.NoError(t, err)
	var raw []int
	require.NoError(t, ldb.Bolt().View(func(tx *bolt.Tx) error {
		return forEachEntry(tx, "\x00oncekv/ledger", func(v []byte) { raw = append(raw, len(v)) })
	}))
	require.Equal(t, []int{want}, raw, "the size the floor writes is the ledger's entry size")

	db, err := open("floor")
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.Bolt().View(func(tx *bolt.Tx) error {
		require.Equal(t, 60, tx.Bucket([]byte(ordersBucket)).Stats().KeyN)
		n := 0
		err := forEachEntry(tx, "floor", func(v []byte) { n++; require.Len(t, v, want) })
		require.Equal(t, 60, n)
		return err
	}))
}

// HarnessConfig.Quota gives the ledger workload's tenants a quota of that
// many records, which its operations check (oncekv bench --quota).
func TestLedgerWorkloadQuota(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) (*kv.DB, error) {
		return kv.Open(filepath.Join(dir, name+".db"), &kv.Options{NoSync: true})
	}
	ctx := context.Background()
	w, err := LedgerWorkload(ctx, "oncekv", HarnessConfig{Quota: 2, Commit: "batch"}, open, false)
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Close()) }()
	payload := make([]byte, 200)
	for i := range 2 {
		require.NoError(t, w.Op(ctx, fmt.Appendf(nil, "op-%d", i), payload, []byte("ok")))
	}
	require.ErrorIs(t, w.Op(ctx, []byte("op-2"), payload, []byte("ok")), ledger.ErrQuotaExceeded)
}

// forEachEntry calls fn with every value of the buckets name.log and
// name.tail (one of them may be absent).
func forEachEntry(tx *bolt.Tx, name string, fn func(v []byte)) error {
	for _, b := range []string{name + ".log", name + ".tail"} {
		if bk := tx.Bucket([]byte(b)); bk != nil {
			if err := bk.ForEach(func(_, v []byte) error { fn(v); return nil }); err != nil {
				return err
			}
		}
	}
	return nil
}

// Every operation runs under its workload's profiler label, so that
// `oncekv bench --cpuprofile` can be split by workload (pprof -tagfocus).
func TestOperationsCarryTheirWorkloadsLabel(t *testing.T) {
	var seen sync.Map
	probe := Workload{Name: "probe", Op: func(ctx context.Context, _, _, _ []byte) error {
		v, _ := pprof.Label(ctx, "workload")
		seen.Store(v, true)
		return nil
	}}
	_, err := RunHarness(context.Background(), HarnessConfig{Duration: 40 * time.Millisecond, Rounds: 1, Clients: 2,
		PayloadBytes: 10, ResponseSize: 10, Commit: "batch", Extra: []Workload{probe}})
	require.NoError(t, err)
	var labels []any
	seen.Range(func(k, _ any) bool { labels = append(labels, k); return true })
	require.Equal(t, []any{"probe"}, labels)
}

// `oncekv bench --trace` traces the measured rounds and not the preload,
// which would bury them; the trace is stopped when the run ends.
func TestTraceCoversTheMeasuredRounds(t *testing.T) {
	var tracedOps, untracedOps, tracedPreload atomic.Int64
	probe := Workload{Name: "probe",
		Preload: func(context.Context, int, []byte) error {
			if trace.IsEnabled() {
				tracedPreload.Add(1)
			}
			return nil
		},
		Op: func(context.Context, []byte, []byte, []byte) error {
			if trace.IsEnabled() {
				tracedOps.Add(1)
			} else {
				untracedOps.Add(1)
			}
			return nil
		}}
	var out bytes.Buffer
	_, err := RunHarness(context.Background(), HarnessConfig{Duration: 40 * time.Millisecond, Rounds: 1, Clients: 2,
		PayloadBytes: 10, ResponseSize: 10, Commit: "batch", Preload: 1, Extra: []Workload{probe}, Trace: &out})
	require.NoError(t, err)
	require.Zero(t, tracedPreload.Load(), "the preload was traced")
	require.Positive(t, tracedOps.Load())
	require.Zero(t, untracedOps.Load(), "an operation ran untraced")
	require.False(t, trace.IsEnabled(), "the trace outlived the run")
	require.NotZero(t, out.Len())
}

// Each round starts one workload further on, so that no workload always
// follows the same one; each workload's ratio comes with the lowest and
// highest of its rounds' ratios (its throughput over the bare write's in
// the same round).
func TestRoundsRotateAndReportTheirRatios(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var ran atomic.Int64 // the workload runs finished (Progress)
	seen := map[string]int64{}
	probe := func(name string) Workload {
		return Workload{Name: name, Op: func(context.Context, []byte, []byte, []byte) error {
			mu.Lock()
			// Every operation of one run sees the same count of runs
			// finished before it, and no other run sees that count.
			if run := ran.Load() + 1; seen[name] != run {
				order = append(order, name)
				seen[name] = run
			}
			mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			return nil
		}}
	}
	rep, err := RunHarness(context.Background(), HarnessConfig{Duration: 200 * time.Millisecond, Rounds: 4, Clients: 2,
		PayloadBytes: 10, ResponseSize: 10, Commit: "batch", Extra: []Workload{probe("a"), probe("b")},
		Progress: func(time.Duration, time.Duration) { ran.Add(1) }})
	require.NoError(t, err)
	// Workloads bare, oncekv, a, b: round 0 runs a then b, rounds 1 and
	// 2 too (a, b, bare... and oncekv, a, b...), round 3 starts at b.
	require.Equal(t, []string{"a", "b", "a", "b", "a", "b", "b", "a"}, order)
	for _, r := range rep.Results {
		require.Positive(t, r.RatioMin, r.Name)
		require.LessOrEqual(t, r.RatioMin, r.RatioMax, r.Name)
		require.GreaterOrEqual(t, r.RatioToBare, r.RatioMin*(1-1e-12), r.Name)
		require.LessOrEqual(t, r.RatioToBare, r.RatioMax*(1+1e-12), r.Name)
		require.InDelta(t, r.OpsPerSec/rep.Results[0].OpsPerSec, r.RatioToBare, 1e-9, r.Name)
	}
	require.Equal(t, 1.0, rep.Results[0].RatioMin)
	require.Equal(t, 1.0, rep.Results[0].RatioMax)
}

// A run's throughput is the mean of its rounds', and its ratio the sum of
// its rounds' throughputs over bare's in the same rounds: it lies between
// the rounds' own ratios however the rounds differ. A round in which the
// bare write did nothing counts in neither.
func TestRunRatioLiesBetweenItsRounds(t *testing.T) {
	// Rounds of bare and one workload: the second round is ten times as
	// fast as the first, and the workload falls from 0.9 to 0.5 of bare.
	rate := [][]float64{{100, 90}, {1000, 500}, {0, 7}}
	ratio, lo, hi := roundRatios(rate, 1)
	require.InDelta(t, 590.0/1100.0, ratio, 1e-12)
	require.InDelta(t, 0.5, lo, 1e-12)
	require.InDelta(t, 0.9, hi, 1e-12)
	require.InDelta(t, 597.0/3, meanRate(rate, 1), 1e-9)
	require.InDelta(t, 1100.0/3, meanRate(rate, 0), 1e-9)

	ratio, lo, hi = roundRatios(rate, 0)
	require.Equal(t, []float64{1, 1, 1}, []float64{ratio, lo, hi})

	ratio, lo, hi = roundRatios([][]float64{{0, 5}}, 1)
	require.Zero(t, ratio+lo+hi, "no round in which bare did something")
	require.Zero(t, meanRate(nil, 0))
}

// Each workload's CPU per operation is the process's CPU time while its
// own rounds ran: a workload that hashes 4 MiB an operation reports
// many times the CPU of one that sleeps, round after round, whatever
// order the rounds run in.
func TestCPUPerOperationIsTheWorkloadsOwn(t *testing.T) {
	if _, ok := processCPU(); !ok {
		t.Skip("no CPU time from this system: the harness reports 0")
	}
	block := make([]byte, 4<<20)
	burn := Workload{Name: "burn", Op: func(context.Context, []byte, []byte, []byte) error {
		_ = sha256.Sum256(block)
		return nil
	}}
	idle := Workload{Name: "idle", Op: func(context.Context, []byte, []byte, []byte) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	}}
	rep, err := RunHarness(context.Background(), HarnessConfig{Duration: 300 * time.Millisecond, Rounds: 3, Clients: 2,
		PayloadBytes: 10, ResponseSize: 10, Commit: "batch", Extra: []Workload{burn, idle}})
	require.NoError(t, err)
	for _, r := range rep.Results {
		require.Positive(t, r.CPUus, r.Name)
	}
	b, i := rep.Get("burn"), rep.Get("idle")
	require.Positive(t, b.Ops)
	require.Positive(t, i.Ops)
	require.Greater(t, b.CPUus, 10*i.CPUus, "burn %.1f µs an operation, idle %.1f", b.CPUus, i.CPUus)
}

package command

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/oncekv/oncekv/bench"
)

func newBench(o *options) *cobra.Command {
	var cfg bench.HarnessConfig
	var gobench bool
	var cpuprofile string
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure durable idempotent writes against bare bbolt, in one run",
		Long: `bench drives concurrent clients against two fresh database files with
identical settings: one doing a bare business write (a Put of --payload
bytes), the other the same write through the idempotency ledger (look-up,
business write, record with a --response-byte stored response, expiry index,
one commit). Rounds alternate between the two so both see the same machine.
It prints ops/s, latency percentiles and the oncekv/bare throughput ratio;
--json for scripts, --gobench for benchstat.`,
		Example: `  oncekv bench
  oncekv bench --clients 64 --duration 10s
  oncekv bench --sync=false --commit update --clients 1
  oncekv bench --gobench > new.txt && benchstat old.txt new.txt`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Clients <= 0 || cfg.Duration <= 0 {
				return usagef("--clients and --duration must be positive")
			}
			if cfg.Commit != "batch" && cfg.Commit != "update" {
				return usagef("--commit must be batch or update")
			}
			if o.db != "" {
				cfg.Dir = o.db
			}
			var bar *progressbar.ProgressBar
			if f, ok := o.out.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !o.json && !gobench {
				bar = progressbar.NewOptions64(int64(2*cfg.Duration/time.Second), progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("bench"), progressbar.OptionClearOnFinish())
				cfg.Progress = func(done, total time.Duration) { _ = bar.Set64(int64(done / time.Second)) }
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := bench.RunHarness(cmd.Context(), cfg)
			if bar != nil {
				_ = bar.Finish()
			}
			if err != nil {
				return err
			}
			if gobench {
				return writeGobench(o.out, cfg, rep)
			}
			out := struct {
				Clients      int            `json:"clients"`
				Seconds      float64        `json:"seconds_per_workload"`
				Sync         bool           `json:"sync"`
				Commit       string         `json:"commit"`
				PayloadBytes int            `json:"payload_bytes"`
				ResponseSize int            `json:"response_bytes"`
				Results      []bench.Result `json:"results"`
				Ratio        float64        `json:"ratio"`
			}{cfg.Clients, cfg.Duration.Seconds(), cfg.Sync, cfg.Commit, cfg.PayloadBytes, cfg.ResponseSize,
				[]bench.Result{rep.Bare, rep.OnceKV}, rep.Ratio}
			return o.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "%d clients, %s per workload, sync=%t, commit=%s, payload %dB, response %dB, %d CPUs\n\n",
					cfg.Clients, cfg.Duration, cfg.Sync, cfg.Commit, cfg.PayloadBytes, cfg.ResponseSize, runtime.NumCPU())
				fmt.Fprintln(w, "WORKLOAD\tOPS\tOPS/S\tP50\tP99\tP99.9\tRATIO")
				for _, r := range out.Results {
					ratio := "1.00"
					if r.Name != "bare" {
						ratio = fmt.Sprintf("%.2f", rep.Ratio)
					}
					fmt.Fprintf(w, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\n", r.Name, r.Ops, r.OpsPerSec, us(r.P50us), us(r.P99us), us(r.P999us), ratio)
				}
			})
		},
	}
	f := c.Flags()
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "time per workload")
	f.IntVar(&cfg.Clients, "clients", 64, "concurrent clients")
	f.IntVar(&cfg.PayloadBytes, "payload", 200, "business value size in bytes")
	f.IntVar(&cfg.ResponseSize, "response", 100, "stored response size in bytes")
	f.BoolVar(&cfg.Sync, "sync", true, "fsync every commit (durable)")
	f.StringVar(&cfg.Commit, "commit", "batch", "batch (group commit) or update (a transaction per operation)")
	f.DurationVar(&cfg.BatchDelay, "batch-delay", 0, "group commit: wait this long for company (0: commit as soon as the writer is idle)")
	f.IntVar(&cfg.BatchSize, "batch-size", 0, "group commit: most operations per transaction (0: default 1000)")
	f.BoolVar(&cfg.BoltBatch, "bolt-batch", false, "use bbolt's own DB.Batch (10ms delay by default) instead of oncekv's group commit")
	f.IntVar(&cfg.Rounds, "rounds", 2, "alternations of the two workloads")
	f.BoolVar(&gobench, "gobench", false, "print Go benchmark format (for benchstat)")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	c.Flags().Lookup("sync").NoOptDefVal = "true"
	return c
}

func us(v float64) string {
	return (time.Duration(v * float64(time.Microsecond))).Round(time.Microsecond).String()
}

// writeGobench prints the run in Go's benchmark format, one line per
// workload, so benchstat can compare invocations.
func writeGobench(w io.Writer, cfg bench.HarnessConfig, rep bench.Report) error {
	name := fmt.Sprintf("clients=%d/sync=%t/commit=%s", cfg.Clients, cfg.Sync, cfg.Commit)
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/oncekv/oncekv/cmd/oncekv\n", runtime.GOOS, runtime.GOARCH)
	for _, r := range []bench.Result{rep.Bare, rep.OnceKV} {
		nsPerOp := 0.0
		if r.OpsPerSec > 0 {
			nsPerOp = 1e9 / r.OpsPerSec
		}
		fmt.Fprintf(w, "BenchmarkHarness/%s/%s-%d\t%d\t%.0f ns/op\t%.0f ops/s\t%.0f p50-us\t%.0f p99-us\t%.0f p99.9-us\n",
			r.Name, name, runtime.GOMAXPROCS(0), r.Ops, nsPerOp, r.OpsPerSec, r.P50us, r.P99us, r.P999us)
	}
	_, err := fmt.Fprintf(w, "BenchmarkHarness/ratio/%s-%d\t1\t%.3f oncekv/bare\n", name, runtime.GOMAXPROCS(0), rep.Ratio)
	return err
}

package command

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/oncekv/oncekv/bench"
	"github.com/oncekv/oncekv/etcdkv"
)

// benchRun is one client count of a bench invocation.
type benchRun struct {
	Clients int            `json:"clients"`
	Results []bench.Result `json:"results"`
	Ratio   float64        `json:"ratio"` // oncekv / bare throughput
	// EtcdGuesses says how the ledger's transactions on etcd fared with
	// their guesses (--against-etcd; etcdkv's "Guessing instead of
	// reading").
	EtcdGuesses *etcdkv.GuessStats `json:"etcd_guesses,omitempty"`
	// Etcd is the ledger's backend's own counts over the run
	// (etcdkv.Stats: its transactions, conflicts, retries, lost answers).
	Etcd *etcdkv.Stats `json:"etcd,omitempty"`
}

// benchOutput is what --json prints: the settings, then one run per client
// count. For a single client count the run's results and ratio are
// repeated at the top level.
type benchOutput struct {
	CPUs         int            `json:"cpus"`
	Seconds      float64        `json:"seconds_per_workload"`
	Sync         bool           `json:"sync"`
	Commit       string         `json:"commit"`
	PayloadBytes int            `json:"payload_bytes"`
	ResponseSize int            `json:"response_bytes"`
	Preload      int            `json:"preload"`
	Tenants      int            `json:"tenants,omitempty"`
	Quota        int64          `json:"quota,omitempty"`
	QuotaAge     string         `json:"quota_count_age,omitempty"`
	Runs         []benchRun     `json:"runs"`
	Results      []bench.Result `json:"results,omitempty"`
	Ratio        float64        `json:"ratio,omitempty"`
}

func newBench(o *options) *cobra.Command {
	var cfg bench.HarnessConfig
	var gobench bool
	var cpuprofile, traceFile, clientList, postgres, etcd string
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure durable idempotent writes against bare bbolt, in one run",
		Long: `bench drives concurrent clients against database files with identical
settings: one doing a bare business write (a Put of --payload bytes), the
other the same write through the idempotency ledger (look-up, business
write, record with a --response-byte stored response, one commit). Rounds
alternate between the workloads so all see the same machine. It prints
ops/s, latency percentiles, each workload's throughput ratio to bare and
its CPU per operation (the process's, while the workload ran: times ops/s,
the cores it kept busy); --json for scripts (and bench/chart), --gobench for benchstat;
--cpuprofile (samples labelled by workload) and --trace (an execution
trace of the measured rounds, go tool trace) show where the time goes.

--preload N fills every file with N rows (and records) first, so the trees
have a realistic depth. --tenants N spreads the ledger's requests over N
tenants: each has its usage counter, written in the request's transaction.
--floor adds what raw bbolt charges for the least a
durable record needs (the business write and one record-sized Put at the
tail of a second bucket): the ceiling under the ledger's ratio. --keyed
adds the ledger on the layout it had before the record log (format 1),
--bare-bolt-batch the bare write through bbolt's own DB.Batch, --against-postgres DSN the classic PostgreSQL pattern (claim
insert, business insert, completion update, one transaction, synchronous
commit) on a server you point it at, --against-etcd the bare write and the
ledger on etcd (the cluster at ENDPOINTS, or "embedded": three members in
this process, fsync as --sync says), --encrypted the ledger with
encryption at rest. --clients-list 1,16,64 runs every
workload at each client count.`,
		Example: `  oncekv bench
  oncekv bench --clients 64 --duration 10s --preload 200000
  oncekv bench --clients-list 1,4,16,64,128 --keyed --bare-bolt-batch --json > runs.json
  oncekv bench --against-postgres postgres://bench@127.0.0.1:5432/bench --clients-list 1,16,64
  oncekv bench --against-etcd embedded --clients-list 1,16,64
  oncekv bench --encrypted --clients-list 1,16,64
  oncekv bench --sync=false --commit update --clients 1
  oncekv bench --gobench > new.txt && benchstat old.txt new.txt`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clients := []int{cfg.Clients}
			if clientList != "" {
				clients = nil
				for _, f := range strings.Split(clientList, ",") {
					n, err := strconv.Atoi(strings.TrimSpace(f))
					if err != nil || n <= 0 {
						return usagef("--clients-list takes positive numbers separated by commas, not %q", clientList)
					}
					clients = append(clients, n)
				}
			}
			if cfg.Clients <= 0 || cfg.Duration <= 0 || cfg.Preload < 0 {
				return usagef("--clients and --duration must be positive, --preload not negative")
			}
			if cfg.Tenants < 1 || cfg.Tenants > 10000 {
				return usagef("--tenants must be between 1 and 10000")
			}
			if cfg.Quota < 0 {
				return usagef("--quota may not be negative")
			}
			if cfg.QuotaCountAge != 0 && cfg.Quota == 0 {
				return usagef("--quota-count-age needs --quota")
			}
			if cfg.PayloadBytes < 0 || cfg.ResponseSize < 0 || cfg.BatchSize < 0 || cfg.BatchDelay < 0 {
				return usagef("--payload, --response, --batch-size and --batch-delay may not be negative")
			}
			if cfg.Commit != "batch" && cfg.Commit != "update" {
				return usagef("--commit must be batch or update")
			}
			if traceFile != "" && len(clients) > 1 {
				return usagef("--trace takes one client count (--clients), not a --clients-list: a file holds one trace")
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
			if traceFile != "" {
				f, err := os.Create(traceFile)
				if err != nil {
					return err
				}
				defer func() { _ = f.Close() }()
				cfg.Trace = f
			}
			var eb *etcdBench
			if etcd != "" {
				var err error
				if eb, err = startEtcdBench(etcd, cfg.Sync); err != nil {
					return err
				}
				defer eb.close()
			}
			out := benchOutput{CPUs: runtime.NumCPU(), Seconds: cfg.Duration.Seconds(), Sync: cfg.Sync, Commit: cfg.Commit,
				PayloadBytes: cfg.PayloadBytes, ResponseSize: cfg.ResponseSize, Preload: cfg.Preload, Tenants: cfg.Tenants, Quota: cfg.Quota}
			if cfg.QuotaCountAge != 0 {
				out.QuotaAge = cfg.QuotaCountAge.String()
			}
			for _, n := range clients {
				run := cfg
				run.Clients = n
				if o.db != "" {
					run.Dir = o.db
				}
				if postgres != "" {
					w, err := postgresWorkload(cmd.Context(), postgres, n)
					if err != nil {
						return err
					}
					run.Extra = []bench.Workload{w}
				}
				var etcdLedger *etcdkv.Backend
				if eb != nil {
					ws, b, err := eb.workloads(cmd.Context(), run)
					if err != nil {
						return err
					}
					run.Extra = append(run.Extra, ws...)
					etcdLedger = b
				}
				var bar *progressbar.ProgressBar
				if f, ok := o.out.(*os.File); ok && term.IsTerminal(int(f.Fd())) && !o.json && !gobench {
					bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(os.Stderr),
						progressbar.OptionSetDescription(fmt.Sprintf("bench, %d clients", n)), progressbar.OptionClearOnFinish())
					run.Progress = func(done, total time.Duration) {
						bar.ChangeMax64(int64(total / time.Second))
						_ = bar.Set64(int64(done / time.Second))
					}
				}
				rep, err := bench.RunHarness(cmd.Context(), run)
				if bar != nil {
					_ = bar.Finish()
				}
				if err != nil {
					return err
				}
				r := benchRun{Clients: n, Results: rep.Results, Ratio: rep.Ratio()}
				if etcdLedger != nil {
					st := etcdLedger.Stats()
					r.EtcdGuesses, r.Etcd = &st.Guesses, &st
				}
				out.Runs = append(out.Runs, r)
			}
			if len(out.Runs) == 1 {
				out.Results, out.Ratio = out.Runs[0].Results, out.Runs[0].Ratio
			}
			if gobench {
				return writeGobench(o.out, cfg, out)
			}
			return o.emit(out, func(w io.Writer) {
				fmt.Fprintf(w, "%s per workload, sync=%t, commit=%s, payload %dB, response %dB, preload %d, tenants %d, %d CPUs\n",
					cfg.Duration, cfg.Sync, cfg.Commit, cfg.PayloadBytes, cfg.ResponseSize, cfg.Preload, max(cfg.Tenants, 1), runtime.NumCPU())
				for _, r := range out.Runs {
					fmt.Fprintf(w, "\n%d clients\nWORKLOAD\tOPS\tOPS/S\tP50\tP99\tP99.9\tRATIO\tROUNDS\tCPU/OP\tBATCH\tCOMMIT\tWRITE\tPAGES\n", r.Clients)
					var plain, sealed float64
					for _, res := range r.Results {
						batch, commit, write, pages, cpu := "-", "-", "-", "-", "-"
						if res.CPUus > 0 {
							cpu = fmt.Sprintf("%.1fµs", res.CPUus)
						}
						if res.Batch > 0 {
							batch = fmt.Sprintf("%.1f", res.Batch)
							commit, write = us(res.CommitUs), us(res.WriteUs)
							pages = fmt.Sprintf("%.1f", res.Pages)
						}
						fmt.Fprintf(w, "%s\t%d\t%.0f\t%s\t%s\t%s\t%.2f\t%.2f-%.2f\t%s\t%s\t%s\t%s\t%s\n", res.Name, res.Ops, res.OpsPerSec, us(res.P50us), us(res.P99us), us(res.P999us), res.RatioToBare, res.RatioMin, res.RatioMax, cpu, batch, commit, write, pages)
						switch res.Name {
						case "oncekv":
							plain = res.OpsPerSec
						case "oncekv-encrypted":
							sealed = res.OpsPerSec
						}
					}
					if plain > 0 && sealed > 0 {
						fmt.Fprintf(w, "encryption at rest costs %.2fx (oncekv ops/s / oncekv-encrypted ops/s)\n", plain/sealed)
					}
					if g := r.EtcdGuesses; g != nil && g.Guessed > 0 {
						fmt.Fprintf(w, "oncekv-etcd's guesses: %d first attempts guessed: %d committed, %d refused for a stale guess (%.1f%%), %d for a conflict, %d void; %d transactions paused guessing\n",
							g.Guessed, g.Committed, g.Refused, 100*float64(g.Refused)/float64(g.Guessed), g.Conflicted, g.Void, g.Paused)
					}
					if st := r.Etcd; st != nil && st.Updates > 0 {
						fmt.Fprintf(w, "oncekv-etcd's transactions: %d updates, %d commits refused for a conflict (%.2f an update), %d exhausted, %d retried, %d answers lost\n",
							st.Updates, st.Conflicts, float64(st.Conflicts)/float64(st.Updates), st.Exhausted, st.Retried, st.AnswersLost)
					}
				}
			})
		},
	}
	f := c.Flags()
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "time per workload")
	f.IntVar(&cfg.Clients, "clients", 64, "concurrent clients")
	f.StringVar(&clientList, "clients-list", "", "run at each of these client counts (1,16,64), instead of --clients")
	f.IntVar(&cfg.PayloadBytes, "payload", 200, "business value size in bytes")
	f.IntVar(&cfg.ResponseSize, "response", 100, "stored response size in bytes")
	f.IntVar(&cfg.Preload, "preload", 0, "rows (and records) in every file before measuring")
	f.IntVar(&cfg.Tenants, "tenants", 1, "spread the ledger's requests over this many tenants, each with its usage counter (at most 10000)")
	f.Int64Var(&cfg.Quota, "quota", 0, "give every tenant a quota of this many records, so each new request checks its usage (0: none; set it above what the run writes to measure the check)")
	f.DurationVar(&cfg.QuotaCountAge, "quota-count-age", 0, "with --quota, on etcd: rely on a tenant's count read at most this long ago, far from the bound (ledger.Quota.MaxCountAge; 0: its default of 1s; negative, as --quota-count-age=-1s: every check reads in its transaction)")
	f.BoolVar(&cfg.Sync, "sync", true, "fsync every commit (durable)")
	f.StringVar(&cfg.Commit, "commit", "batch", "batch (group commit) or update (a transaction per operation)")
	f.DurationVar(&cfg.BatchDelay, "batch-delay", 0, "group commit: wait this long for company (0: commit as soon as the writer is idle)")
	f.BoolVar(&cfg.SyncFreelist, "sync-freelist", false, "write bbolt's freelist at every commit, not only at close (kv.Options.SyncFreelist)")
	f.BoolVar(&cfg.Gather, "gather", false, "group commit: a batch waits for the callers of the previous one to come back (kv.Options.GatherCallers)")
	f.IntVar(&cfg.BatchSize, "batch-size", 0, "group commit: most operations per transaction (0: default 1000)")
	f.BoolVar(&cfg.BoltBatch, "bolt-batch", false, "commit both main workloads through bbolt's own DB.Batch (10ms delay by default)")
	f.BoolVar(&cfg.BareBoltBatch, "bare-bolt-batch", false, "add the bare write through bbolt's own DB.Batch as a workload")
	f.BoolVar(&cfg.Encrypted, "encrypted", false, "add the ledger with encryption at rest (a random key): its ratio to oncekv is the cost of sealing")
	f.BoolVar(&cfg.Uncached, "uncached", false, "add the ledger with its cache of recent records off (kv.Options.RecentCacheBytes): its ratio to oncekv is what the cache costs")
	f.BoolVar(&cfg.Keyed, "keyed", false, "add the ledger on its format-1 layout (records under their keys), as before the record log")
	f.BoolVar(&cfg.Floor, "floor", false, "add the floor: the business write plus a record-sized Put at the tail of a second bucket, raw bbolt, the least a durable record costs")
	f.StringVar(&postgres, "against-postgres", "", "add the classic PostgreSQL pattern on this server (a pgx DSN; tables oncekv_bench_* are created and emptied)")
	f.StringVar(&etcd, "against-etcd", "", "add the bare write and the ledger on etcd: the cluster at these endpoints (keys under /oncekv-bench/, deleted after), or \"embedded\" (three members in this process)")
	f.IntVar(&cfg.Rounds, "rounds", 2, "alternations of the workloads")
	f.BoolVar(&gobench, "gobench", false, "print Go benchmark format (for benchstat)")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	f.StringVar(&traceFile, "trace", "", "write an execution trace of the measured rounds to this file (go tool trace; at 64 clients, about a megabyte for each second measured)")
	c.Flags().Lookup("sync").NoOptDefVal = "true"
	return c
}

func us(v float64) string {
	return (time.Duration(v * float64(time.Microsecond))).Round(time.Microsecond).String()
}

// writeGobench prints the runs in Go's benchmark format, one line per
// workload and a ratio line per run, so benchstat can compare invocations.
func writeGobench(w io.Writer, cfg bench.HarnessConfig, out benchOutput) error {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/oncekv/oncekv/cmd/oncekv\n", runtime.GOOS, runtime.GOARCH)
	for _, run := range out.Runs {
		name := fmt.Sprintf("clients=%d/sync=%t/commit=%s/preload=%d", run.Clients, cfg.Sync, cfg.Commit, cfg.Preload)
		for _, r := range run.Results {
			nsPerOp := 0.0
			if r.OpsPerSec > 0 {
				nsPerOp = 1e9 / r.OpsPerSec
			}
			cpu := "" // none where the system does not report CPU time: benchstat would compare a 0
			if r.CPUus > 0 {
				cpu = fmt.Sprintf("\t%.2f cpu-us/op", r.CPUus)
			}
			fmt.Fprintf(w, "BenchmarkHarness/%s/%s-%d\t%d\t%.0f ns/op\t%.0f ops/s\t%.0f p50-us\t%.0f p99-us\t%.0f p99.9-us%s\n",
				r.Name, name, runtime.GOMAXPROCS(0), r.Ops, nsPerOp, r.OpsPerSec, r.P50us, r.P99us, r.P999us, cpu)
		}
		if _, err := fmt.Fprintf(w, "BenchmarkHarness/ratio/%s-%d\t1\t%.3f oncekv/bare\n", name, runtime.GOMAXPROCS(0), run.Ratio); err != nil {
			return err
		}
	}
	return nil
}

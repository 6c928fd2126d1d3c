package command

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/bench"
	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/kv"
)

func TestBench(t *testing.T) {
	t.Parallel()
	out, stderr, code := run("bench", "--duration", "400ms", "--clients", "4", "--json")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Results []struct {
			Name      string  `json:"name"`
			Ops       int64   `json:"ops"`
			OpsPerSec float64 `json:"ops_per_sec"`
			P99us     float64 `json:"p99_us"`
			Batch     float64 `json:"batch"`
			CommitUs  float64 `json:"commit_us"`
			WriteUs   float64 `json:"write_us"`
			Pages     float64 `json:"pages"`
			Ratio     float64 `json:"ratio_to_bare"`
			RatioMin  float64 `json:"ratio_min"`
			RatioMax  float64 `json:"ratio_max"`
			Cache     int     `json:"cache_bytes"`
			CPUus     float64 `json:"cpu_us"`
		} `json:"results"`
		Ratio float64 `json:"ratio"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Results, 2)
	require.Equal(t, "bare", res.Results[0].Name)
	require.Equal(t, "oncekv", res.Results[1].Name)
	for _, r := range res.Results {
		require.Positive(t, r.Ops)
		require.Positive(t, r.P99us)
		// Operations per commit: at least one, at most the clients.
		require.GreaterOrEqual(t, r.Batch, 1.0, r.Name)
		require.LessOrEqual(t, r.Batch, 4.0, r.Name)
		// Where a commit's time goes: the write and fsync are part of it,
		// and every commit writes the changed leaf, its bucket's entry in
		// the root and the meta page at least (the freelist only at close).
		require.Positive(t, r.WriteUs, r.Name)
		require.Greater(t, r.CommitUs, r.WriteUs, r.Name)
		require.GreaterOrEqual(t, r.Pages, 3.0, r.Name)
		// The rounds' ratios bound the run's.
		require.Positive(t, r.RatioMin, r.Name)
		require.GreaterOrEqual(t, r.RatioMax, r.RatioMin, r.Name)
		require.GreaterOrEqual(t, r.Ratio, r.RatioMin*(1-1e-12), r.Name)
		require.LessOrEqual(t, r.Ratio, r.RatioMax*(1+1e-12), r.Name)
		if runtime.GOOS != "windows" { // no getrusage there
			require.Positive(t, r.CPUus, r.Name)
		}
	}
	require.Positive(t, res.Ratio)

	out, stderr, code = run("bench", "--duration", "300ms", "--clients", "4", "--gather", "--json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	for _, r := range res.Results {
		require.Positive(t, r.Ops)
		require.GreaterOrEqual(t, r.Batch, 1.0, r.Name)
		require.LessOrEqual(t, r.Batch, 4.0, r.Name)
	}
	// --uncached adds the ledger with its cache of recent records off.
	out, stderr, code = run("bench", "--duration", "200ms", "--clients", "2", "--sync=false", "--uncached", "--json")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res.Results, 3)
	require.Equal(t, "oncekv-uncached", res.Results[2].Name)
	require.Positive(t, res.Results[2].Ops)
	// Each ledger says which cache it ran with: the figures of
	// oncekv-uncached are of a ledger whose cache is off.
	require.Zero(t, res.Results[0].Cache, "bare has no ledger")
	require.Equal(t, kv.DefaultRecentCacheBytes, res.Results[1].Cache)
	require.Zero(t, res.Results[2].Cache, "oncekv-uncached")

	_, _, code = run("bench", "--gather", "--batch-delay", "1ms")
	require.NotZero(t, code, "gathering and a fixed delay exclude each other")

	out, _, code = run("bench", "--duration", "200ms", "--clients", "2", "--sync=false", "--commit", "update", "--gobench")
	require.Equal(t, 0, code)
	require.Contains(t, out, "BenchmarkHarness/bare/clients=2/sync=false/commit=update/preload=0-")
	require.Contains(t, out, " ns/op")
	if runtime.GOOS != "windows" {
		require.Contains(t, out, " cpu-us/op")
	}
	require.Equal(t, 3, strings.Count(out, "BenchmarkHarness/"))

	table, _, code := run("bench", "--duration", "200ms", "--clients", "2", "--sync=false")
	require.Equal(t, 0, code)
	require.Contains(t, table, "WORKLOAD")
	require.Contains(t, table, "BATCH")
	require.Contains(t, table, "ROUNDS")
	require.Contains(t, table, "PAGES")
	require.Contains(t, table, "CPU/OP")
	require.Contains(t, table, "oncekv")
	_, _, code = run("bench", "--commit", "nope")
	require.Equal(t, 2, code)
	_, _, code = run("bench", "--tenants", "10001")
	require.Equal(t, 2, code)
	_, _, code = run("bench", "--quota", "-1")
	require.Equal(t, 2, code)
	_, _, code = run("bench", "--quota-count-age", "5s")
	require.Equal(t, 2, code, "a count age without a quota")
}

// bench --tenants spreads the ledger's requests over that many tenants.
// Their usage is counted in memory: a transaction of one request writes
// the same pages with 1,000 tenants as with one (when each tenant had a
// counter in the file, 1,000 of them no longer fitted inline, and each
// such transaction wrote their leaf and its branch beside the record's:
// two pages more).
func TestBenchTenants(t *testing.T) {
	t.Parallel()
	pages := func(tenants string) (bare, oncekv float64) {
		out, stderr, code := run("bench", "--duration", "200ms", "--clients", "1", "--sync=false", "--commit", "update",
			"--preload", "3000", "--tenants", tenants, "--json")
		require.Equal(t, 0, code, stderr)
		var res struct {
			Tenants int `json:"tenants"`
			Results []struct {
				Name  string  `json:"name"`
				Pages float64 `json:"pages"`
			} `json:"results"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		if tenants != "1" {
			require.Equal(t, tenants, fmt.Sprint(res.Tenants))
		}
		require.Equal(t, "oncekv", res.Results[1].Name)
		return res.Results[0].Pages, res.Results[1].Pages
	}
	bare1, one := pages("1")
	bareN, many := pages("1000")
	require.InDelta(t, bare1, bareN, 0.5, "the bare write has no tenants")
	require.InDelta(t, one, many, 0.5, "1000 tenants cost no page more than one")
}

// bench --against-etcd embedded adds the bare write and the ledger on a
// three-member etcd cluster started for the run, in the same rounds.
func TestBenchAgainstEtcd(t *testing.T) {
	t.Parallel()
	out, stderr, code := run("bench", "--against-etcd", "embedded", "--duration", "600ms", "--clients", "4", "--sync=false", "--json",
		"--quota", "1000000000", "--quota-count-age=-1s")
	require.Equal(t, 0, code, stderr)
	var res struct {
		Quota    int64  `json:"quota"`
		QuotaAge string `json:"quota_count_age"`
		Results  []struct {
			Name        string  `json:"name"`
			Ops         int64   `json:"ops"`
			RatioToBare float64 `json:"ratio_to_bare"`
		} `json:"results"`
		Runs []struct {
			EtcdGuesses *etcdkv.GuessStats `json:"etcd_guesses"`
			Etcd        *etcdkv.Stats      `json:"etcd"`
		} `json:"runs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, int64(1000000000), res.Quota, "every request checked a quota (none refused)")
	require.Equal(t, "-1s", res.QuotaAge, "every check exact")
	require.Len(t, res.Results, 4)
	require.Equal(t, "etcd-bare", res.Results[2].Name)
	require.Equal(t, "oncekv-etcd", res.Results[3].Name)
	for _, r := range res.Results {
		require.Positive(t, r.Ops, r.Name)
		require.Positive(t, r.RatioToBare, r.Name)
	}
	// The ledger's writes on etcd guess (etcdkv's "Guessing instead of
	// reading"), and the run says how that went.
	require.Len(t, res.Runs, 1)
	g := res.Runs[0].EtcdGuesses
	require.NotNil(t, g, "no etcd_guesses in %s", out)
	require.Positive(t, g.Committed, "no write committed on its guesses: %+v", g)
	require.Equal(t, g.Guessed, g.Committed+g.Refused+g.Conflicted+g.Void, "%+v", g)
	// And what its transactions met: every guessed first attempt was an
	// update of the run.
	st := res.Runs[0].Etcd
	require.NotNil(t, st, "no etcd in %s", out)
	require.Equal(t, *g, st.Guesses)
	require.GreaterOrEqual(t, st.Updates, g.Guessed+g.Paused, "%+v", st)
	require.GreaterOrEqual(t, st.Updates, uint64(res.Results[3].Ops), "%+v", st)
}

// bench --trace writes an execution trace of the run (go tool trace), and
// refuses a --clients-list, whose runs one file cannot hold.
func TestBenchTrace(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "run.trace")
	_, stderr, code := run("bench", "--duration", "200ms", "--clients", "2", "--sync=false", "--trace", file)
	require.Equal(t, 0, code, stderr)
	trace, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Regexp(t, `^go 1\.\d+ trace`, string(trace[:min(16, len(trace))]), "not an execution trace")

	other := filepath.Join(t.TempDir(), "runs.trace")
	_, stderr, code = run("bench", "--clients-list", "1,2", "--trace", other)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--trace takes one client count")
	require.NoFileExists(t, other)
}

// A panic under a command (bbolt meeting a damaged page, or a bug) is an
// error with exit status 1, not a crash; its message cannot tell which, so
// it names both. bench's sizes are checked before anything runs: a
// negative --payload made such a panic, reported as a damaged file.
func TestPanicsAreFailuresThatSayWhatTheyMayBe(t *testing.T) {
	root := &cobra.Command{Use: "t", RunE: func(*cobra.Command, []string) error { panic("page 42: unreachable") }}
	root.SetArgs(nil)
	err := execute(context.Background(), root)
	require.ErrorContains(t, err, "failed reading the database (page 42: unreachable): a damaged file does this")
	require.ErrorContains(t, err, "if the file checks clean, it is a bug in oncekv")

	for _, flag := range []string{"--payload", "--response", "--batch-size"} {
		_, stderr, code := run("bench", flag, "-5", "--duration", "1s")
		require.Equal(t, 2, code, flag)
		require.Contains(t, stderr, "--payload, --response, --batch-size and --batch-delay may not be negative", flag)
	}
	_, err = bench.RunHarness(context.Background(), bench.HarnessConfig{Clients: 1, Duration: time.Second, PayloadBytes: -1})
	require.ErrorContains(t, err, "may not be negative")
}

package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
	}
	require.Positive(t, res.Ratio)

	out, _, code = run("bench", "--duration", "200ms", "--clients", "2", "--sync=false", "--commit", "update", "--gobench")
	require.Equal(t, 0, code)
	require.Contains(t, out, "BenchmarkHarness/bare/clients=2/sync=false/commit=update/preload=0-")
	require.Contains(t, out, " ns/op")
	require.Equal(t, 3, strings.Count(out, "BenchmarkHarness/"))

	table, _, code := run("bench", "--duration", "200ms", "--clients", "2", "--sync=false")
	require.Equal(t, 0, code)
	require.Contains(t, table, "WORKLOAD")
	require.Contains(t, table, "oncekv")
	_, _, code = run("bench", "--commit", "nope")
	require.Equal(t, 2, code)
}

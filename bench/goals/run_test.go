package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeGo writes a go command that logs each call (its arguments, and
// ONCEKV_BENCH_BIG) to the returned log and prints canned output for the
// steps: the sweep, the paired benchmarks, the open and the heap. It
// fails a call whose arguments contain failOn (if not empty).
func fakeGo(t *testing.T, failOn string) (tool, log string) {
	if runtime.GOOS == "windows" {
		t.Skip("a shell script stands in for the go command")
	}
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	files := map[string]string{
		"sweep":  sweepOutput,
		"single": "BenchmarkSingleTx-2 20000 50000 ns/op 1.51 ratio\nBenchmarkFloorSingleTx-2 20000 45000 ns/op 1.30 ratio\nBenchmarkReplayHit-2 20000 2600 ns/op 1.04 ratio\n",
		"mw":     "BenchmarkMiddleware/durable=true/clients=1-2 4000 1 ns/op 1.08 ratio\nBenchmarkMiddleware/durable=true/clients=16-2 4000 1 ns/op 1.20 ratio\n",
		"open":   "BenchmarkOpen/records=1000000/after=close-2 5 550000000 ns/op\nBenchmarkOpen/records=1000000/after=crash-2 5 620000000 ns/op\n",
		"heap":   "BenchmarkDirectoryHeap/via=add-2 1 1 ns/op 37.7 heap-B/record\n",
	}
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	script := `#!/bin/sh
echo "$* BIG=$ONCEKV_BENCH_BIG" >> ` + log + `
case "$*" in
*'` + failOn + `'*) [ -n '` + failOn + `' ] && { echo "FAIL" >&2; exit 1; } ;;
esac
d=` + dir + `
case "$*" in
run*) cat $d/sweep ;;
*SingleTx*) cat $d/single ;;
*Middleware*) cat $d/mw ;;
*BenchmarkOpen*) cat $d/open ;;
*DirectoryHeap*) cat $d/heap ;;
esac
`
	tool = filepath.Join(dir, "go")
	require.NoError(t, os.WriteFile(tool, []byte(script), 0o700)) //nolint:gosec // an executable script
	return tool, log
}

// The steps run in order, the sweep and the paired benchmarks once per
// run, the open (of 1M records) and the heap once; the table holds every
// run's figures and goes to -out too.
func TestRunMeasuresEveryGoal(t *testing.T) {
	tool, log := fakeGo(t, "")
	t.Chdir("../..")
	out := filepath.Join(t.TempDir(), "goals.md")
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(config{runs: 2, out: out, goTool: tool}, &stdout, &stderr))

	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	require.Len(t, lines, 8)
	for i, want := range []string{"run ./cmd/oncekv bench --clients-list 1,16,64 --preload 200000 --duration 8s --rounds 4 --floor --json BIG=",
		"SingleTx", "Middleware", "run ./cmd/oncekv bench", "SingleTx", "Middleware",
		"test ./bench -run ^$ -bench ^BenchmarkOpen/records=1000000/ -benchtime 5x -count 1 BIG=1",
		"test ./internal/recstore -run ^$ -bench ^BenchmarkDirectoryHeap$ -benchtime 1x -count 1 BIG="} {
		require.Contains(t, lines[i], want, "call %d", i)
	}
	require.Contains(t, lines[1], "-benchtime 20000x -count 2 BIG=")
	require.Contains(t, lines[2], "-benchtime 4000x -count 2 BIG=")

	table := stdout.String()
	require.Contains(t, table, "| throughput against bare, 64 clients, durable, 200000 rows preloaded | ≥ 0.90 | 0.83 / 0.83 (rounds 0.83–0.84) | 0.88 / 0.88 | missed (the floor misses it too) |")
	require.Contains(t, table, "| `BenchmarkSingleTx` (NoSync, one write a transaction) | ≤ 1.25x | 1.51x / 1.51x | 1.30x / 1.30x | missed (the floor misses it too) |")
	require.Contains(t, table, "| middleware, durable, 1 client | ≤ 1.10x | 1.08x / 1.08x | — | met |")
	require.Contains(t, table, "| open with 1000000 live records, after a crash | ≤ 1 s | 0.62 s | — | met |")
	require.Contains(t, table, "| the key directory's heap per live record (1M) | ≤ 40 bytes | 37.7 B | — | met |")
	kept, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, table, string(kept))
	require.Contains(t, stderr.String(), "goals: open: go test ./bench")
}

// -quick shortens every step and opens 100k records; -skip-open leaves the
// open out; a step that fails stops the run, named.
func TestRunQuickSkipAndFailure(t *testing.T) {
	tool, log := fakeGo(t, "")
	t.Chdir("../..")
	var stdout bytes.Buffer
	require.NoError(t, run(config{quick: true, goTool: tool}, &stdout, &bytes.Buffer{}))
	calls, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Contains(t, string(calls), "--preload 2000 --duration 300ms --rounds 1")
	require.Contains(t, string(calls), "-bench ^BenchmarkOpen/records=100000/ -benchtime 1x -count 1 BIG=\n")
	require.Contains(t, stdout.String(), "-quick (not figures to quote)")
	require.Contains(t, stdout.String(), "| throughput against bare, 64 clients, durable, 2000 rows preloaded |")
	require.Contains(t, stdout.String(), "| open with 100000 live records, after a close | (the goal is for 1M) | — | — | not measured |")

	tool, log = fakeGo(t, "")
	stdout.Reset()
	require.NoError(t, run(config{skipOpen: true, goTool: tool}, &stdout, &bytes.Buffer{}))
	calls, err = os.ReadFile(log)
	require.NoError(t, err)
	require.NotContains(t, string(calls), "BenchmarkOpen")
	require.NotContains(t, stdout.String(), "open with")

	tool, _ = fakeGo(t, "Middleware")
	err = run(config{goTool: tool}, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, "middleware: exit status 1")

	t.Chdir(t.TempDir())
	require.ErrorContains(t, run(config{goTool: tool}, &bytes.Buffer{}, &bytes.Buffer{}), "run it from the repository's root")
}

package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

func main() {
	var cfg config
	flag.BoolVar(&cfg.quick, "quick", false, "short runs (seconds in all): checks that every step runs, figures not to quote")
	flag.BoolVar(&cfg.skipOpen, "skip-open", false, "leave out the open of 1M records (it fills a file of 1M records first)")
	flag.IntVar(&cfg.runs, "runs", 1, "run the throughput sweep and the paired benchmarks this many times (the open and the heap once): a goal's figures then show how much they move")
	flag.StringVar(&cfg.out, "out", "", "also write the table (markdown) to this file")
	flag.Parse()
	if err := run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "goals:", err)
		os.Exit(1)
	}
}

type config struct {
	quick, skipOpen bool
	runs            int
	out             string
	goTool          string // the go command ("go"; tests give a fake)
}

// run measures every goal and prints the table to stdout, the steps'
// progress to stderr.
func run(cfg config, stdout, stderr io.Writer) error {
	if _, err := os.Stat("bench/goals/main.go"); err != nil {
		return fmt.Errorf("run it from the repository's root (go run ./bench/goals): %w", err)
	}
	s := settings{duration: "8s", rounds: "4", preload: "200000", count: "2", writes: "20000x", requests: "4000x", opens: "5x"}
	if cfg.quick {
		s = settings{duration: "300ms", rounds: "1", preload: "2000", count: "1", writes: "500x", requests: "100x", opens: "1x"}
	}
	if cfg.goTool == "" {
		cfg.goTool = "go"
	}
	m := measured{preload: s.preload}
	started := time.Now()
	// step runs the go tool with args (env added to this process's).
	step := func(name string, env []string, args ...string) ([]byte, error) {
		fmt.Fprintf(stderr, "goals: %s: go %s\n", name, strings.Join(args, " "))
		cmd := exec.Command(cfg.goTool, args...) //nolint:gosec // the go tool, with the steps' own arguments
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return out.Bytes(), nil
	}

	bench := func(name, pkg, pattern, benchtime, count string, env []string) error {
		out, err := step(name, env, "test", pkg, "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", count)
		if err != nil {
			return err
		}
		return m.benchmarks.add(out)
	}
	for range max(cfg.runs, 1) {
		out, err := step("throughput", nil, "run", "./cmd/oncekv", "bench", "--clients-list", "1,16,64",
			"--preload", s.preload, "--duration", s.duration, "--rounds", s.rounds, "--floor", "--json")
		if err != nil {
			return err
		}
		sweep, err := parseSweep(out)
		if err != nil {
			return err
		}
		m.sweeps = append(m.sweeps, sweep)
		if err := bench("single writes and replays", "./bench", "^Benchmark(Floor)?SingleTx$|^BenchmarkReplayHit$|^BenchmarkFloorReplay$", s.writes, s.count, nil); err != nil {
			return err
		}
		if err := bench("middleware", "./bench", "^Benchmark(Floor)?Middleware/durable=true/clients=(1|16)$", s.requests, s.count, nil); err != nil {
			return err
		}
	}
	openRecords := 0
	if !cfg.skipOpen {
		openRecords = 1_000_000
		pattern, env := "^BenchmarkOpen/records=1000000/", []string{"ONCEKV_BENCH_BIG=1"}
		if cfg.quick {
			openRecords, pattern, env = 100_000, "^BenchmarkOpen/records=100000/", nil
		}
		if err := bench("open", "./bench", pattern, s.opens, "1", env); err != nil {
			return err
		}
	}
	if err := bench("directory heap", "./internal/recstore", "^BenchmarkDirectoryHeap$", "1x", "1", nil); err != nil {
		return err
	}

	var table bytes.Buffer
	fmt.Fprintf(&table, "Goals of the hot path, %s, %d CPUs, %s, measured in %s by `go run ./bench/goals`%s:\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), time.Since(started).Round(time.Second), map[bool]string{true: " -quick (not figures to quote)"}[cfg.quick])
	writeTable(&table, m.goals(openRecords))
	if _, err := stdout.Write(table.Bytes()); err != nil {
		return err
	}
	if cfg.out != "" {
		return os.WriteFile(cfg.out, table.Bytes(), 0o644)
	}
	return nil
}

// settings are the steps' sizes.
type settings struct {
	duration, rounds, preload, count string
	writes, requests, opens          string // -benchtime of each step
}

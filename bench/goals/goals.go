package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/oncekv/oncekv/bench"
)

// measured is what the steps printed.
type measured struct {
	sweeps     []map[int][]bench.Result // each run's, by client count
	preload    string                   // rows in each file of the sweep
	benchmarks benchmarks
}

// parseSweep reads oncekv bench --clients-list --json.
func parseSweep(out []byte) (map[int][]bench.Result, error) {
	var v struct {
		Runs []struct {
			Clients int            `json:"clients"`
			Results []bench.Result `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("reading oncekv bench --json: %w", err)
	}
	if len(v.Runs) == 0 {
		return nil, fmt.Errorf("oncekv bench --json printed no runs")
	}
	sweep := map[int][]bench.Result{}
	for _, r := range v.Runs {
		sweep[r.Clients] = r.Results
	}
	return sweep, nil
}

// benchmarks holds, by benchmark name (GOMAXPROCS suffix removed), each
// run's metrics by unit.
type benchmarks map[string][]map[string]float64

// add reads go test -bench output: a result line is the name, the
// iterations, then value and unit pairs. Other lines are skipped.
func (b *benchmarks) add(out []byte) error {
	if *b == nil {
		*b = benchmarks{}
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		metrics := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("benchmark %s: metric %q: %w", name, f[i+1], err)
			}
			metrics[f[i+1]] = v
		}
		(*b)[name] = append((*b)[name], metrics)
	}
	return sc.Err()
}

// values returns the unit's value in every run of the named benchmark.
func (b benchmarks) values(name, unit string) []float64 {
	var vs []float64
	for _, m := range b[name] {
		if v, ok := m[unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// goal is one row of the table.
type goal struct {
	name   string
	target string
	// measured and floor are the figures, each run's; floor is empty
	// where there is none.
	measured, floor []float64
	unit            string // printed after each figure
	// atLeast: the goal is a lower bound (throughput), else an upper
	// bound (cost).
	atLeast bool
	bound   float64
	// spread is the rounds' lowest and highest ratio (throughput), if any.
	spread [2]float64
}

// verdict compares the mean of the runs with the goal's bound: met or
// missed, and whether the floor's mean is already past it (no code can
// reach the goal on that machine that day).
func (g goal) verdict() string {
	switch {
	case len(g.measured) == 0:
		return "not measured"
	case math.IsInf(g.bound, 0):
		return ""
	}
	ok := func(v float64) bool {
		if g.atLeast {
			return v >= g.bound
		}
		return v <= g.bound
	}
	v := "missed"
	if ok(mean(g.measured)) {
		v = "met"
	}
	if len(g.floor) > 0 && !ok(mean(g.floor)) {
		v += " (the floor misses it too)"
	}
	return v
}

func mean(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// goals lists the goals from what was measured; openRecords is the size of
// the open measured (0: none).
func (m measured) goals(openRecords int) []goal {
	var gs []goal
	// sweep returns the named workload's result at clients in each sweep.
	sweep := func(clients int, name string) []bench.Result {
		var rs []bench.Result
		for _, sw := range m.sweeps {
			for _, r := range sw[clients] {
				if r.Name == name {
					rs = append(rs, r)
				}
			}
		}
		return rs
	}
	ratios := func(rs []bench.Result) []float64 {
		vs := make([]float64, 0, len(rs))
		for _, r := range rs {
			vs = append(vs, r.RatioToBare)
		}
		return vs
	}
	for _, c := range []struct {
		clients int
		bound   float64
	}{{64, 0.90}, {16, 0.85}, {1, 0.85}} {
		got := sweep(c.clients, "oncekv")
		var spread [2]float64 // the lowest and highest of the rounds' ratios
		for i, r := range got {
			if i == 0 || r.RatioMin < spread[0] {
				spread[0] = r.RatioMin
			}
			spread[1] = max(spread[1], r.RatioMax)
		}
		clients := fmt.Sprintf("%d clients", c.clients)
		if c.clients == 1 {
			clients = "1 client"
		}
		gs = append(gs, goal{name: fmt.Sprintf("throughput against bare, %s, durable, %s rows preloaded", clients, m.preload),
			target: fmt.Sprintf("≥ %.2f", c.bound), measured: ratios(got), floor: ratios(sweep(c.clients, "floor")), atLeast: true, bound: c.bound, spread: spread})
		if c.clients == 64 {
			var ops []float64
			for _, r := range got {
				ops = append(ops, r.OpsPerSec)
			}
			gs = append(gs, goal{name: "oncekv's throughput, 64 clients", target: "≥ 10,000 ops/s", measured: ops, unit: " ops/s", atLeast: true, bound: 10000})
		}
	}
	pairs := []struct {
		name, bench, floor string
		bound              float64
	}{
		{"`BenchmarkSingleTx` (NoSync, one write a transaction)", "BenchmarkSingleTx", "BenchmarkFloorSingleTx", 1.25},
		{"`BenchmarkReplayHit`", "BenchmarkReplayHit", "BenchmarkFloorReplay", 1.25},
		{"middleware, durable, 1 client", "BenchmarkMiddleware/durable=true/clients=1", "BenchmarkFloorMiddleware/durable=true/clients=1", 1.10},
		{"middleware, durable, 16 clients", "BenchmarkMiddleware/durable=true/clients=16", "BenchmarkFloorMiddleware/durable=true/clients=16", 1.10},
	}
	for _, p := range pairs {
		gs = append(gs, goal{name: p.name, target: fmt.Sprintf("≤ %.2fx", p.bound), measured: m.benchmarks.values(p.bench, "ratio"),
			floor: m.benchmarks.values(p.floor, "ratio"), unit: "x", bound: p.bound})
	}
	if openRecords > 0 {
		target, bound := "≤ 1 s", 1.0
		if openRecords != 1_000_000 {
			target, bound = "(the goal is for 1M)", math.Inf(1)
		}
		for _, after := range []string{"close", "crash"} {
			var secs []float64
			for _, ns := range m.benchmarks.values(fmt.Sprintf("BenchmarkOpen/records=%d/after=%s", openRecords, after), "ns/op") {
				secs = append(secs, ns/1e9)
			}
			gs = append(gs, goal{name: fmt.Sprintf("open with %d live records, after a %s", openRecords, after), target: target,
				measured: secs, unit: " s", bound: bound})
		}
	}
	gs = append(gs, goal{name: "the key directory's heap per live record (1M)", target: "≤ 40 bytes",
		measured: append(m.benchmarks.values("BenchmarkDirectoryHeap/via=add", "heap-B/record"), m.benchmarks.values("BenchmarkDirectoryHeap/via=load", "heap-B/record")...),
		unit:     " B", bound: 40})
	return gs
}

// writeTable prints the goals as a markdown table.
func writeTable(w io.Writer, gs []goal) {
	fmt.Fprintln(w, "| goal | target | measured | floor (same run) | |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, g := range gs {
		got := figures(g.measured, g.unit)
		if g.spread[1] > 0 {
			got += fmt.Sprintf(" (rounds %.2f–%.2f)", g.spread[0], g.spread[1])
		}
		floor := "—"
		if len(g.floor) > 0 {
			floor = figures(g.floor, g.unit)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", g.name, g.target, got, floor, g.verdict())
	}
}

// figures prints each run's value with the unit after each.
func figures(vs []float64, unit string) string {
	if len(vs) == 0 {
		return "—"
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		switch unit {
		case " ops/s":
			s[i] = strconv.FormatFloat(math.Round(v), 'f', 0, 64) + unit
		case " B":
			s[i] = strconv.FormatFloat(v, 'f', 1, 64) + unit
		default:
			s[i] = strconv.FormatFloat(v, 'f', 2, 64) + unit
		}
	}
	return strings.Join(s, " / ")
}

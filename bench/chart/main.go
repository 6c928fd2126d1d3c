package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

type result struct {
	Name      string  `json:"name"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P99us     float64 `json:"p99_us"`
}

type run struct {
	Clients int      `json:"clients"`
	Results []result `json:"results"`
}

type input struct {
	CPUs    int   `json:"cpus"`
	Sync    bool  `json:"sync"`
	Preload int   `json:"preload"`
	Runs    []run `json:"runs"`
}

// labels name the workloads for readers.
var labels = map[string]string{
	"bare":           "bare bbolt write (oncekv group commit)",
	"bare-boltbatch": "bare bbolt write (bbolt DB.Batch)",
	"oncekv":         "oncekv, record log (after)",
	"oncekv-keyed":   "oncekv, keyed records (before)",
	"floor":          "floor: bare write + a record-sized Put, raw bbolt",
	"postgres":       "PostgreSQL, claim + insert + complete",
}

// colors keep each workload's color whatever else the run had.
var colors = map[string]color.Color{
	"bare":           color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff},
	"bare-boltbatch": color.RGBA{R: 0xaa, G: 0xaa, B: 0xaa, A: 0xff},
	"oncekv":         color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"oncekv-keyed":   color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"floor":          color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"postgres":       color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// plainTicks labels the default ticks as plain numbers (12,500, not
// 12500.00).
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%g", ts[i].Value)
		}
	}
	return ts
}

func main() {
	in := flag.String("in", "", "JSON from oncekv bench --clients-list ... --json")
	out := flag.String("out", "throughput.svg", "SVG to write")
	flag.Parse()
	if err := draw2(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

func draw2(inPath, outPath string) error {
	raw, err := os.ReadFile(inPath) //nolint:gosec // the file named on the command line
	if err != nil {
		return err
	}
	var data input
	if err := json.Unmarshal(raw, &data); err != nil {
		return err
	}
	if len(data.Runs) < 2 {
		return fmt.Errorf("%s has %d runs; run oncekv bench with --clients-list", inPath, len(data.Runs))
	}
	var names []string
	for _, r := range data.Runs[0].Results {
		names = append(names, r.Name)
	}
	mode := "durable"
	if !data.Sync {
		mode = "no fsync"
	}
	tp := plot.New()
	tp.Title.Text = fmt.Sprintf("Throughput (%s, %d rows preloaded, %d CPUs)", mode, data.Preload, data.CPUs)
	tp.X.Label.Text = "clients"
	tp.Y.Label.Text = "operations per second"
	lat := plot.New()
	lat.Title.Text = "p99 latency"
	lat.X.Label.Text = "clients"
	lat.Y.Label.Text = "milliseconds"
	for _, p := range []*plot.Plot{tp, lat} {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top = true
		p.Legend.Left = true
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
	}
	for _, name := range names {
		var thr, p99 plotter.XYs
		for _, r := range data.Runs {
			for _, res := range r.Results {
				if res.Name == name {
					thr = append(thr, plotter.XY{X: float64(r.Clients), Y: res.OpsPerSec})
					p99 = append(p99, plotter.XY{X: float64(r.Clients), Y: res.P99us / 1000})
				}
			}
		}
		label := labels[name]
		if label == "" {
			label = name
		}
		for _, s := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{tp, thr}, {lat, p99}} {
			line, points, err := plotter.NewLinePoints(s.xys)
			if err != nil {
				return err
			}
			c := colors[name]
			if c == nil {
				c = color.Black
			}
			line.Color, points.Color = c, c
			line.Width = vg.Points(1.5)
			points.Shape = draw.CircleGlyph{}
			s.p.Add(line, points)
			if s.p == tp {
				s.p.Legend.Add(label, line, points)
			}
		}
	}
	const w, h = 8 * vg.Inch, 4 * vg.Inch
	canvas := vgsvg.New(w, 2*h)
	dc := draw.New(canvas)
	top := draw.Crop(dc, 0, 0, h, 0)
	bottom := draw.Crop(dc, 0, 0, 0, -h)
	tp.Draw(top)
	lat.Draw(bottom)
	f, err := os.Create(outPath) //nolint:gosec // the file named on the command line
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

package bench

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// SoakReport is a soak run: its load and one sample per interval.
type SoakReport struct {
	Agents     int     `json:"agents"`
	AgentProcs int     `json:"agent_procs"`
	Rate       float64 `json:"jobs_per_s"`
	Minutes    float64 `json:"minutes"`
	IntervalS  float64 `json:"interval_s"`
	// JobsBytesPerNode and ResultsBytesPerNode are what the jobs bucket
	// and the results stream grew by over the run, per completed job and
	// per node it ran on.
	JobsBytesPerNode    float64 `json:"kv_jobs_bytes_per_job_node"`
	ResultsBytesPerNode float64 `json:"results_bytes_per_job_node"`
	// The same on disk (compressed blocks).
	JobsDiskPerNode    float64      `json:"kv_jobs_disk_bytes_per_job_node"`
	ResultsDiskPerNode float64      `json:"results_disk_bytes_per_job_node"`
	Samples            []SoakSample `json:"samples"`
}

// NewSoakReport computes the storage per job and node from the first and
// last samples.
func NewSoakReport(agents, procs int, rate, intervalS float64, samples []SoakSample) SoakReport {
	r := SoakReport{Agents: agents, AgentProcs: procs, Rate: rate, IntervalS: intervalS, Samples: samples}
	if len(samples) == 0 {
		return r
	}
	first, last := samples[0], samples[len(samples)-1]
	r.Minutes = math.Round(last.Minutes*10) / 10
	if n := float64(last.JobsTotal) * float64(agents); n > 0 {
		r.JobsBytesPerNode = math.Round((float64(last.JobsStoreBytes) - float64(first.JobsStoreBytes)) / n)
		r.ResultsBytesPerNode = math.Round((float64(last.ResultsBytes) - float64(first.ResultsBytes)) / n)
		r.JobsDiskPerNode = math.Round((float64(last.JobsDiskBytes) - float64(first.JobsDiskBytes)) / n)
		r.ResultsDiskPerNode = math.Round((float64(last.ResultsDiskBytes) - float64(first.ResultsDiskBytes)) / n)
	}
	return r
}

// Table writes one row per sample.
func (r SoakReport) Table(w io.Writer) {
	_, _ = fmt.Fprintf(w, "soak: %d agents (%d processes), %.2f fan-out jobs/s, %.1f min, a sample every %.0fs\n",
		r.Agents, r.AgentProcs, r.Rate, r.Minutes, r.IntervalS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "min\tjobs\tfailed\tskipped\tp50 ms\tp99 ms\tctl RSS MiB\tlive heap\theap in use\tlimit\tgoroutines\tfds\tKV_jobs MiB\tresults MiB\tagent RSS MiB\tagent anon\tagent heap\tagent goroutines\tagent fds\t")
	for _, s := range r.Samples {
		_, _ = fmt.Fprintf(tw, "%.2f\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%d\t%d\t%.2f\t%.2f\t%.1f\t%.1f\t%.2f\t%d\t%d\t\n",
			s.Minutes, s.Jobs, s.Failed, s.Skipped, s.P50Ms, s.P99Ms, s.CtlRSSMiB, s.CtlLiveHeapMiB, s.CtlHeapMiB, s.CtlLimitMiB,
			s.CtlGoroutines, s.CtlOpenFDs, toMiB(s.JobsStoreBytes), toMiB(s.ResultsBytes), s.AgentRSSMiB, s.AgentAnonMiB,
			s.AgentLiveHeapMiB, s.AgentGoroutines, s.AgentOpenFDs)
	}
	_ = tw.Flush()
	_, _ = fmt.Fprintf(w, "stored per completed job and node: KV_jobs %.0f bytes (%.0f on disk), results %.0f bytes (%.0f on disk)\n",
		r.JobsBytesPerNode, r.JobsDiskPerNode, r.ResultsBytesPerNode, r.ResultsDiskPerNode)
	for _, s := range r.Samples {
		for _, e := range s.Errors {
			_, _ = fmt.Fprintf(w, "at %.1f min: %s\n", s.Minutes, e)
		}
	}
}

// soakPanel is one plot of the figure: a title, its y axis and lines.
type soakPanel struct {
	title, y string
	lines    []soakLine
}

type soakLine struct {
	name string
	val  func(SoakSample) float64
}

var soakPanels = []soakPanel{
	{"controller memory", "MiB", []soakLine{
		{"RSS", func(s SoakSample) float64 { return s.CtlRSSMiB }},
		{"heap in use", func(s SoakSample) float64 { return s.CtlHeapMiB }},
		{"live heap", func(s SoakSample) float64 { return s.CtlLiveHeapMiB }},
		{"soft limit", func(s SoakSample) float64 { return s.CtlLimitMiB }},
	}},
	{"controller goroutines and open files", "count", []soakLine{
		{"goroutines", func(s SoakSample) float64 { return float64(s.CtlGoroutines) }},
		{"open files", func(s SoakSample) float64 { return float64(s.CtlOpenFDs) }},
	}},
	{"one agent process", "MiB / count", []soakLine{
		{"RSS MiB", func(s SoakSample) float64 { return s.AgentRSSMiB }},
		{"anonymous RSS MiB", func(s SoakSample) float64 { return s.AgentAnonMiB }},
		{"live heap MiB", func(s SoakSample) float64 { return s.AgentLiveHeapMiB }},
		{"goroutines", func(s SoakSample) float64 { return float64(s.AgentGoroutines) }},
		{"open files", func(s SoakSample) float64 { return float64(s.AgentOpenFDs) }},
	}},
	{"stored (JetStream)", "MiB", []soakLine{
		{"KV_jobs", func(s SoakSample) float64 { return toMiB(s.JobsStoreBytes) }},
		{"results", func(s SoakSample) float64 { return toMiB(s.ResultsBytes) }},
		{"KV_jobs on disk", func(s SoakSample) float64 { return toMiB(s.JobsDiskBytes) }},
		{"results on disk", func(s SoakSample) float64 { return toMiB(s.ResultsDiskBytes) }},
	}},
	{"job latency, submit to completed, per interval", "ms", []soakLine{
		{"p50", func(s SoakSample) float64 { return s.P50Ms }},
		{"p99", func(s SoakSample) float64 { return s.P99Ms }},
	}},
}

// WritePNG draws the samples over time, one panel per kind of figure
// stacked on a shared time axis, to a PNG file.
func (r SoakReport) WritePNG(path string) error {
	if len(r.Samples) < 2 {
		return errors.New("plot: fewer than two samples")
	}
	var rows [][]*plot.Plot
	for _, pn := range soakPanels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = pn.y
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		var args []any
		for _, l := range pn.lines {
			xys := make(plotter.XYs, len(r.Samples))
			for i, s := range r.Samples {
				xys[i].X, xys[i].Y = s.Minutes, l.val(s)
			}
			args = append(args, l.name, xys)
		}
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return fmt.Errorf("plot %s: %w", pn.title, err)
		}
		// Room above the highest line for the legend; a line at 0 only
		// still gets an axis.
		p.Y.Max = max(p.Y.Max*1.35, 1)
		rows = append(rows, []*plot.Plot{p})
	}
	const width, panelHeight = 9 * vg.Inch, 2.6 * vg.Inch
	img := vgimg.New(width, panelHeight*vg.Length(len(rows))+0.5*vg.Inch)
	dc := draw.New(img)
	head := dc
	head.Min.Y = head.Max.Y - 0.5*vg.Inch
	title := fmt.Sprintf("grid bench soak: %d agents (%d processes), %.2f fan-out jobs/s, %.1f min", r.Agents, r.AgentProcs, r.Rate, r.Minutes)
	head.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), XAlign: draw.XCenter, YAlign: draw.YCenter,
		Handler: plot.DefaultTextHandler},
		vg.Point{X: (head.Min.X + head.Max.X) / 2, Y: (head.Min.Y + head.Max.Y) / 2}, title)
	body := dc
	body.Max.Y -= 0.5 * vg.Inch
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(10)}
	canvases := plot.Align(rows, tiles, body)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// toMiB turns bytes into MiB, unrounded (the stores start near 0).
func toMiB(b uint64) float64 { return float64(b) / (1 << 20) }

package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// SitesReport is the result of bench sites: what one site's link carried
// for a one-step broadcast to that site's agents, and the fan-out to every
// site's agents through their relays against as many agents connected to
// the controller directly.
type SitesReport struct {
	Sites         int  `json:"sites"`
	AgentsPerSite int  `json:"agents_per_site"`
	AgentProcs    bool `json:"agent_procs"`
	// Link is one site's link during a broadcast to its agents.
	Link SiteLinkReport `json:"link"`
	// ViaSites is the fan-out to Sites × AgentsPerSite agents reached
	// through their relays; Direct to as many agents connected to the
	// controller.
	ViaSites FanoutSide `json:"via_sites"`
	Direct   FanoutSide `json:"direct"`
	// RatioP50 is ViaSites.P50Ms / Direct.P50Ms.
	RatioP50 float64 `json:"ratio_p50"`
}

// SiteLinkReport counts the messages and bytes that crossed a site's link
// (at the hub's end of the leaf connection) during a one-step broadcast
// to the site's agents (job_*), and during an idle window as long right
// after (idle_*: heartbeats and the relay's roster requests).
type SiteLinkReport struct {
	Agents       int     `json:"agents"`
	WindowMs     float64 `json:"window_ms"`
	JobMsgsOut   int64   `json:"job_msgs_to_site"`
	JobMsgsIn    int64   `json:"job_msgs_from_site"`
	JobBytesOut  int64   `json:"job_bytes_to_site"`
	JobBytesIn   int64   `json:"job_bytes_from_site"`
	IdleMsgsOut  int64   `json:"idle_msgs_to_site"`
	IdleMsgsIn   int64   `json:"idle_msgs_from_site"`
	IdleBytesOut int64   `json:"idle_bytes_to_site"`
	IdleBytesIn  int64   `json:"idle_bytes_from_site"`
}

// FanoutSide is one side of the comparison: rounds of a one-step job to
// every agent, timed from submit to completed (p50/p90) and as the
// controller saw them (span: created_at to finished_at).
type FanoutSide struct {
	Agents    int     `json:"agents"`
	Rounds    int     `json:"rounds"`
	P50Ms     float64 `json:"p50_ms"`
	P90Ms     float64 `json:"p90_ms"`
	SpanP50Ms float64 `json:"span_p50_ms"`
	SpanP90Ms float64 `json:"span_p90_ms"`
	Verified  int     `json:"verified"`
}

// NewFanoutSide computes one side's percentiles.
func NewFanoutSide(agents int, res FanoutResult) FanoutSide {
	return FanoutSide{Agents: agents, Rounds: len(res.Latencies), Verified: res.Verified,
		P50Ms: ms(Percentile(res.Latencies, 50)), P90Ms: ms(Percentile(res.Latencies, 90)),
		SpanP50Ms: ms(Percentile(res.Spans, 50)), SpanP90Ms: ms(Percentile(res.Spans, 90))}
}

// NewSitesReport puts the measurements together.
func NewSitesReport(sites, perSite int, procs bool, link LinkResult, via, direct FanoutSide) SitesReport {
	return SitesReport{Sites: sites, AgentsPerSite: perSite, AgentProcs: procs, ViaSites: via, Direct: direct,
		RatioP50: ratio(via.P50Ms, direct.P50Ms),
		Link: SiteLinkReport{Agents: link.Agents, WindowMs: ms(link.Window.Round(time.Millisecond)),
			JobMsgsOut: link.Job.OutMsgs, JobMsgsIn: link.Job.InMsgs, JobBytesOut: link.Job.OutBytes, JobBytesIn: link.Job.InBytes,
			IdleMsgsOut: link.Idle.OutMsgs, IdleMsgsIn: link.Idle.InMsgs, IdleBytesOut: link.Idle.OutBytes, IdleBytesIn: link.Idle.InBytes}}
}

// Table prints the report for a terminal.
func (r SitesReport) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	l := r.Link
	_, _ = fmt.Fprintln(tw, "one site's link, broadcast to its agents\tagents\twindow ms\tmsgs to site\tmsgs from site\tbytes to site\tbytes from site\t")
	_, _ = fmt.Fprintf(tw, "job\t%d\t%.0f\t%d\t%d\t%d\t%d\t\n", l.Agents, l.WindowMs, l.JobMsgsOut, l.JobMsgsIn, l.JobBytesOut, l.JobBytesIn)
	_, _ = fmt.Fprintf(tw, "idle, as long\t%d\t%.0f\t%d\t%d\t%d\t%d\t\n", l.Agents, l.WindowMs, l.IdleMsgsOut, l.IdleMsgsIn, l.IdleBytesOut, l.IdleBytesIn)
	_ = tw.Flush()
	_, _ = fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "fan-out\tagents\trounds\tp50 ms\tp90 ms\tspan p50 ms\tspan p90 ms\t")
	for _, s := range []struct {
		name string
		f    FanoutSide
	}{{fmt.Sprintf("%d sites × %d", r.Sites, r.AgentsPerSite), r.ViaSites}, {"direct", r.Direct}} {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", s.name, s.f.Agents, s.f.Rounds, s.f.P50Ms, s.f.P90Ms, s.f.SpanP50Ms, s.f.SpanP90Ms)
	}
	_ = tw.Flush()
	_, _ = fmt.Fprintf(w, "ratio p50 (sites / direct): %.2f\n", r.RatioP50)
}

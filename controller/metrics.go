package controller

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

// metrics are one controller's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg *prometheus.Registry

	jobsSubmitted     prometheus.Counter
	jobsFinished      *prometheus.CounterVec
	admissionRejected prometheus.Counter
	deadLettered      prometheus.Counter
	jobDuration       *prometheus.HistogramVec
	stepDuration      *prometheus.HistogramVec
	firstResult       prometheus.Histogram
	taskResults       *prometheus.CounterVec
	retries           *prometheus.CounterVec
	heartbeats        prometheus.Counter
	apiRefused        *prometheus.CounterVec
	auditFailed       prometheus.Counter
	auditDropped      prometheus.Counter
	// jobNodes counts the nodes of finished jobs by outcome.
	jobNodes *prometheus.CounterVec
	// rateLimited counts task starts a rate limit delayed; rateWaiting
	// is how many wait now, by the limit's action.
	rateLimited *prometheus.CounterVec
	rateWaiting *prometheus.GaugeVec
	// scheduleFired and scheduleSkipped count schedule ticks (schedules.go).
	scheduleFired   prometheus.Counter
	scheduleSkipped *prometheus.CounterVec
}

func newMetrics(c *Controller) *metrics {
	m := &metrics{
		reg: telemetry.NewRegistry(),
		jobsSubmitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_jobs_submitted_total",
			Help: "Jobs accepted by POST /job on this controller.",
		}),
		jobsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_jobs_finished_total",
			Help: "Jobs this controller ran to the end, by final status.",
		}, []string{"status"}),
		admissionRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_admission_rejections_total",
			Help: "Job submissions refused with 429 because max_pending jobs were waiting.",
		}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_requests_dead_lettered_total",
			Help: "Job requests this controller moved to the dead-letter stream after max_deliveries deliveries without a claim.",
		}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grid_job_duration_seconds",
			Help:    "Time from a job's start to its end, by final status.",
			Buckets: telemetry.TaskBuckets,
		}, []string{"status"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grid_step_duration_seconds",
			Help:    "Time from a step's first dispatch until every node is past it, by backend, action and outcome (failed when any node failed it).",
			Buckets: telemetry.TaskBuckets,
		}, []string{"backend", "action", "status"}),
		firstResult: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "grid_dispatch_first_result_seconds",
			Help:    "Time from publishing a command to the first report from a node: 'running' once a task has run for 100ms, else its final result.",
			Buckets: telemetry.LatencyBuckets,
		}),
		taskResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_task_results_total",
			Help: "Final task results received from agents (success, failed) or declared by the controller (lost: timeout; unreachable: the node went offline), by backend and action.",
		}, []string{"backend", "action", "status"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_task_retries_total",
			Help: "Task attempts scheduled again after a failure, by backend and action.",
		}, []string{"backend", "action"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_node_heartbeats_total",
			Help: "Node registrations and heartbeats seen in the nodes bucket.",
		}),
		apiRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_api_refused_total",
			Help: "API calls refused for their token: Unauthorized (missing, unknown or revoked) or Forbidden (role too weak).",
		}, []string{"reason"}),
		auditFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_audit_write_failures_total",
			Help: "Audit records that could not be written (a mutating API call refused with 503, or a controller's own record lost).",
		}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_audit_auth_failures_dropped_total",
			Help: "Refused calls (401 and 403) not recorded in the audit trail: more than the limits (per source address or token, or in all).",
		}),
		jobNodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_job_nodes_total",
			Help: "Nodes of the jobs this controller finished, by outcome (targeted, succeeded, failed, unreachable, not_started).",
		}, []string{"outcome"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_rate_limited_total",
			Help: "Task starts this controller's runs held back by a rate limit (each counted once, when it first finds no unit), by the limit's action.",
		}, []string{"action"}),
		rateWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grid_rate_limited_waiting",
			Help: "Task starts of this controller's runs waiting now for a rate limit's unit, by the limit's action.",
		}, []string{"action"}),
		scheduleFired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "grid_schedule_fired_total",
			Help: "Schedule ticks whose job this controller confirmed submitted (each tick counts once across the cluster).",
		}),
		scheduleSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_schedule_skipped_total",
			Help: "Schedule ticks that fired no job, by reason: overlap (the previous job had not finished), missed (catch_up skip after no controller fired them in time), refused (the job was refused at submission).",
		}, []string{"reason"}),
	}
	m.reg.MustRegister(m.jobsSubmitted, m.jobsFinished, m.admissionRejected, m.deadLettered, m.jobDuration,
		m.stepDuration, m.firstResult, m.taskResults, m.retries, m.heartbeats, m.apiRefused, m.auditFailed, m.auditDropped, m.jobNodes,
		m.rateLimited, m.rateWaiting, m.scheduleFired, m.scheduleSkipped,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "grid_jobs_running",
			Help: "Jobs this controller is running.",
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return float64(len(c.runs))
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "grid_bus_replies_refused_total",
			Help: "Requests to this controller (enrollments, agents' reports, registrations and heartbeats) dropped unanswered because their reply subject was not their sender's own inbox.",
		}, func() float64 {
			if c.replies == nil {
				return 0
			}
			return float64(c.replies.refused.Load())
		}),
		&nodeCollector{c: c},
		&natsCollector{c: c},
		&replicaCollector{c: c},
	)
	return m
}

func (m *metrics) handler() http.Handler { return telemetry.Handler(m.reg) }

// Registry is the controller's private Prometheus registry, served at
// GET /metrics.
func (c *Controller) Registry() *prometheus.Registry { return c.metrics.reg }

// NATSServer is the embedded NATS server.
func (c *Controller) NATSServer() *server.Server { return c.ns }

// nodeCollector reports the registry's nodes by state at scrape time.
type nodeCollector struct{ c *Controller }

var nodesDesc = prometheus.NewDesc("grid_nodes", "Known nodes by state (online: heartbeat within node_offline_after).", []string{"status"}, nil)

func (n *nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- nodesDesc }

func (n *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if n.c.reg == nil {
		return
	}
	counts := n.c.reg.counts()
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(counts.Online), api.NodeOnline)
	ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(counts.Offline), api.NodeOffline)
}

// natsCollector reads the embedded server's state at scrape time, without a
// network round trip: connections, each stream's size, the scheduler
// consumer's backlog and the number of jobs waiting to be claimed.
type natsCollector struct{ c *Controller }

var (
	natsUpDesc = prometheus.NewDesc("grid_nats_up",
		"1 when the embedded NATS server runs with JetStream and this controller is connected to it.", nil, nil)
	natsConnsDesc = prometheus.NewDesc("grid_nats_connections",
		"Client connections to the embedded NATS server.", nil, nil)
	streamMsgsDesc = prometheus.NewDesc("grid_jetstream_stream_messages",
		"Messages stored in a JetStream stream (KV buckets are streams named KV_<bucket>).", []string{"stream"}, nil)
	streamBytesDesc = prometheus.NewDesc("grid_jetstream_stream_bytes",
		"Bytes stored in a JetStream stream.", []string{"stream"}, nil)
	consumerPendingDesc = prometheus.NewDesc("grid_jetstream_consumer_pending_messages",
		"Messages the scheduler consumer has not been delivered yet.", []string{"stream", "consumer"}, nil)
	consumerAckPendingDesc = prometheus.NewDesc("grid_jetstream_consumer_ack_pending_messages",
		"Messages delivered to the scheduler consumer and not acknowledged yet.", []string{"stream", "consumer"}, nil)
	jobsPendingDesc = prometheus.NewDesc("grid_jobs_pending",
		"Submitted jobs no controller has claimed yet (messages in the requests stream).", nil, nil)
)

func (n *natsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{natsUpDesc, natsConnsDesc, streamMsgsDesc, streamBytesDesc,
		consumerPendingDesc, consumerAckPendingDesc, jobsPendingDesc} {
		ch <- d
	}
}

func (n *natsCollector) Collect(ch chan<- prometheus.Metric) {
	ns, nc := n.c.ns, n.c.nc
	if ns == nil {
		return
	}
	up := ns.Running() && ns.JetStreamEnabled() && nc != nil && nc.IsConnected()
	ch <- prometheus.MustNewConstMetric(natsUpDesc, prometheus.GaugeValue, boolFloat(up))
	ch <- prometheus.MustNewConstMetric(natsConnsDesc, prometheus.GaugeValue, float64(ns.NumClients()))
	if !ns.Running() || !ns.JetStreamEnabled() {
		return
	}
	info, err := ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil {
		return
	}
	for _, acc := range info.AccountDetails {
		for _, s := range acc.Streams {
			ch <- prometheus.MustNewConstMetric(streamMsgsDesc, prometheus.GaugeValue, float64(s.State.Msgs), s.Name)
			ch <- prometheus.MustNewConstMetric(streamBytesDesc, prometheus.GaugeValue, float64(s.State.Bytes), s.Name)
			if s.Name == api.StreamRequests {
				ch <- prometheus.MustNewConstMetric(jobsPendingDesc, prometheus.GaugeValue, float64(s.State.Msgs))
			}
			for _, ci := range s.Consumer {
				// Only the scheduler's durable consumers: the others are
				// short-lived KV watchers and ordered consumers.
				if ci == nil || s.Name != api.StreamRequests || !strings.HasPrefix(ci.Name, schedulerConsumer) {
					continue
				}
				ch <- prometheus.MustNewConstMetric(consumerPendingDesc, prometheus.GaugeValue, float64(ci.NumPending), s.Name, ci.Name)
				ch <- prometheus.MustNewConstMetric(consumerAckPendingDesc, prometheus.GaugeValue, float64(ci.NumAckPending), s.Name, ci.Name)
			}
		}
	}
}

// replicaCollector asks JetStream at scrape time for each stream's and
// bucket's replication state, wherever its replicas live: the embedded
// server's own view (natsCollector) lacks the streams it holds no replica
// of, and those are the ones a lost server takes with it.
type replicaCollector struct{ c *Controller }

var (
	streamReplicasDesc = prometheus.NewDesc("grid_jetstream_stream_replicas",
		"Configured replicas of a JetStream stream (KV buckets are streams named KV_<bucket>); absent while the stream has no leader to say.", []string{"stream"}, nil)
	streamCurrentDesc = prometheus.NewDesc("grid_jetstream_stream_current_replicas",
		"Replicas of a stream that are online and up to date, the leader included; below grid_jetstream_stream_replicas, one more loss may cost data or availability.", []string{"stream"}, nil)
	streamLeaderlessDesc = prometheus.NewDesc("grid_jetstream_stream_leaderless",
		"1 when a stream has no leader (or does not answer): it takes no writes and serves no reads.", []string{"stream"}, nil)
)

func (r *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- streamReplicasDesc
	ch <- streamCurrentDesc
	ch <- streamLeaderlessDesc
}

func (r *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	nc := r.c.nc
	if r.c.js == nil || nc == nil || !nc.IsConnected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamHealthTimeout)
	defer cancel()
	for _, h := range r.c.streamHealth(ctx) {
		if h.Replicas > 0 {
			ch <- prometheus.MustNewConstMetric(streamReplicasDesc, prometheus.GaugeValue, float64(h.Replicas), h.Stream)
		}
		ch <- prometheus.MustNewConstMetric(streamCurrentDesc, prometheus.GaugeValue, float64(h.Current), h.Stream)
		ch <- prometheus.MustNewConstMetric(streamLeaderlessDesc, prometheus.GaugeValue, boolFloat(!h.HasLeader), h.Stream)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observeJob records a finished job.
func (m *metrics) observeJob(started, finished *time.Time, status api.JobStatus) {
	m.jobsFinished.WithLabelValues(string(status)).Inc()
	if started != nil {
		end := time.Now()
		if finished != nil {
			end = *finished
		}
		m.jobDuration.WithLabelValues(string(status)).Observe(end.Sub(*started).Seconds())
	}
}

// observeNodes counts a finished job's nodes by outcome.
func (m *metrics) observeNodes(s api.JobSummary) {
	m.jobNodes.WithLabelValues("targeted").Add(float64(s.Targeted))
	m.jobNodes.WithLabelValues("succeeded").Add(float64(s.Succeeded))
	m.jobNodes.WithLabelValues("failed").Add(float64(s.Failed))
	m.jobNodes.WithLabelValues(api.StepUnreachable).Add(float64(s.Unreachable))
	m.jobNodes.WithLabelValues(api.StepNotStarted).Add(float64(s.NotStarted))
}

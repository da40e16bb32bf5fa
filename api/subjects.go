package api

import (
	"strconv"
	"strings"
	"time"
)

// DefaultHeartbeatInterval is how often an agent re-sends its node record
// unless configured otherwise; a controller's node_offline_after must be
// well above it.
const DefaultHeartbeatInterval = 10 * time.Second

// Stream, bucket and subject names shared by controller and agents.
const (
	StreamRequests = "requests"
	StreamCommands = "commands"
	StreamResults  = "results"

	BucketJobs        = "jobs"
	BucketNodes       = "nodes"
	BucketControllers = "controllers"
	// BucketSchemas holds backend schema sets keyed by SchemaDigest.
	BucketSchemas = "schemas"
	// BucketTokens holds the API tokens (hashed) by name; only controllers
	// read it.
	BucketTokens = "tokens"
	// BucketKeys holds the cluster key that encrypts sensitive params at
	// rest (controllers only).
	BucketKeys = "keys"
	// BucketJobSecrets holds, by job id, a job's sensitive param values
	// encrypted under the cluster key, while the job may still run.
	BucketJobSecrets = "job_secrets"

	SubjectRequests = "request.>"
	SubjectCommands = "cmd.>"
	SubjectResults  = "result.>"
	// SubjectProgress carries running and progress reports; no stream
	// captures it. Its exact depth (progress.<job>.<step>.<node>), not
	// "progress.>": a hub tells a site's relay of its interest only in
	// subjects the relay may publish on (progress.*.*.<node> of each of
	// the site's nodes), and the server finds those under a "*" token but
	// not under a ">" one, so with "progress.>" no site node's running or
	// progress report would cross the link.
	SubjectProgress = "progress.*.*.*"
	// SubjectCancelAll is what agents subscribe to for cancellations.
	SubjectCancelAll = "cancel.*"
)

// RequestSubject is where a submitted job id is queued.
func RequestSubject(jobID string) string { return "request." + jobID }

// CommandSubject is where a step for a target is broadcast:
// cmd.all.<b>.<a>, cmd.group.<g>.<b>.<a>, cmd.node.<id>.<b>.<a>.
// ScopeAny is dispatched to the node the controller chose, so it has no
// subject of its own.
func CommandSubject(t Target, backend, action string) string {
	switch t.Scope {
	case ScopeAll:
		return "cmd.all." + backend + "." + action
	case ScopeGroup:
		return "cmd.group." + GroupToken(t.Value) + "." + backend + "." + action
	case ScopeSite:
		return SiteCommandSubject(t.Value, backend, action)
	default:
		return NodeCommandSubject(t.Value, backend, action)
	}
}

// NodeCommandSubject addresses one node.
func NodeCommandSubject(node, backend, action string) string {
	return "cmd.node." + node + "." + backend + "." + action
}

// GroupToken is a group's name as one subject token: its segments joined
// by '~' (which no segment holds) instead of '.'. Every command subject
// thus has the same depth, so a subscription that the server's permission
// check lets through (it matches a '>' in the subscription against a '*'
// allowed) still cannot reach another group's commands: with
// cmd.group.web.*.* allowed, cmd.group.web.*.> hears only group web's
// commands, as there is no deeper subject for web.dev's to hide in.
func GroupToken(group string) string { return strings.ReplaceAll(group, ".", "~") }

// AgentCommandSubjects are the subjects an agent with this id, site and
// groups listens on. A group subscription names the group's exact depth
// (cmd.group.web.*.* and cmd.group.web~dev.*.*), so an agent in web.dev
// hears commands for web and web.dev but not for web.prod. The site's
// subject is cmd.site.<site>.*.* (an empty site is DefaultSite).
func AgentCommandSubjects(id, site string, groups []string) []string {
	subs := []string{"cmd.all.*.*", "cmd.node." + id + ".*.*", "cmd.site." + SiteOf(site) + ".*.*"}
	seen := map[string]bool{}
	for _, g := range groups {
		segs := strings.Split(g, ".")
		for i := range segs {
			prefix := strings.Join(segs[:i+1], ".")
			if seen[prefix] {
				continue
			}
			seen[prefix] = true
			subs = append(subs, "cmd.group."+GroupToken(prefix)+".*.*")
		}
	}
	return subs
}

// ResultSubject is where a controller stores a job's final results:
// result.<job>, one subject for every step and node of the job. The step
// and the node are in the stored TaskResult, which the controller writes
// (no agent may publish on result.>; the intake takes both from the
// report's subject, and the message id names the node). One subject per
// job rather than per node keeps the server's in-memory per-subject index
// of the stream to one entry per job: with a subject per node result it
// held an entry for each of the millions of results a busy fleet stores
// within the stream's max_age.
func ResultSubject(jobID string) string { return "result." + jobID }

// ProgressSubject is where a node reports that a step is running and how
// far it got: progress.<job>.<step>.<node>. These reports are core messages
// only (not stored): losing one is harmless, and keeping them out of the
// results stream halves its writes.
func ProgressSubject(jobID string, step int, node string) string {
	return "progress." + jobID + "." + strconv.Itoa(step) + "." + node
}

// JobResultsSubjects filter every result of one job: those stored on
// ResultSubject, and those of an earlier version stored on
// result.<job>.<step>.<node> (which a controller upgraded mid-job reads
// back on recovery).
func JobResultsSubjects(jobID string) []string {
	return []string{ResultSubject(jobID), "result." + jobID + ".>"}
}

// CancelSubject tells agents to stop a job's running tasks.
func CancelSubject(jobID string) string { return "cancel." + jobID }

// CancelledJob is the job a cancel subject names ("" if it is none).
func CancelledJob(subject string) string {
	job, ok := strings.CutPrefix(subject, "cancel.")
	if !ok {
		return ""
	}
	return job
}

// IsNodeCommand reports whether a command subject addresses one node
// (cmd.node.…), not a group or every node.
func IsNodeCommand(subject string) bool { return strings.HasPrefix(subject, "cmd.node.") }

// Core subjects an agent publishes on. No stream captures them: a
// controller (queue group) validates each message and stores what it
// holds itself, so no reply subject or header an agent chooses reaches
// JetStream (DESIGN.md, "Bus security").
const (
	// SubjectReportAll is what controllers take final results on.
	SubjectReportAll = "report.*.*.*"
	// SubjectNodeRegisterAll and SubjectNodeHeartbeatAll are what
	// controllers take node records on.
	SubjectNodeRegisterAll  = "node.register.*"
	SubjectNodeHeartbeatAll = "node.heartbeat.*"
	// ReportResendHdr marks a final result sent again for a repeated
	// command: the controller stores it under a fresh message id of its
	// own, so it is not taken for a duplicate of the first.
	ReportResendHdr = "Grid-Resend"
)

// ReportSubject is where a node sends a step's final result to the
// controllers: report.<job>.<step>.<node> (a request; the answer is a
// StoreReply once the result is stored on ResultSubject).
func ReportSubject(jobID string, step int, node string) string {
	return "report." + jobID + "." + strconv.Itoa(step) + "." + node
}

// NodeReportSubjects and NodeProgressSubjects are the subjects a node may
// publish its final results and progress reports on.
func NodeReportSubjects(node string) string   { return "report.*.*." + node }
func NodeProgressSubjects(node string) string { return "progress.*.*." + node }

// NodeRegisterSubject is where a node registers (a request carrying a
// NodeRegistration): node.register.<id>.
func NodeRegisterSubject(node string) string { return "node.register." + node }

// NodeHeartbeatSubject is where a node refreshes its record (a request
// carrying NodeInfo without schemas): node.heartbeat.<id>.
func NodeHeartbeatSubject(node string) string { return "node.heartbeat." + node }

package api

// StreamHealth is the replication state of one JetStream stream or KV
// bucket, as GET /status shows it.
type StreamHealth struct {
	// Name is the stream's or bucket's name; Bucket says which.
	Name   string `json:"name"`
	Bucket bool   `json:"bucket,omitempty"`
	// Stream is the JetStream stream behind it (KV_<bucket> for a bucket).
	Stream string `json:"stream"`
	// Replicas is the stream's configured replica count.
	Replicas int `json:"replicas"`
	// Current counts the replicas that are up to date, the leader included.
	Current int `json:"current_replicas"`
	// HasLeader is false when no server leads the stream: it takes no
	// writes and answers no reads.
	HasLeader bool   `json:"has_leader"`
	Leader    string `json:"leader,omitempty"`
	// Error is why the stream's state could not be read.
	Error string `json:"error,omitempty"`
}

// Healthy reports whether the stream has a leader and all its replicas
// current.
func (h StreamHealth) Healthy() bool {
	return h.Error == "" && h.HasLeader && h.Current >= h.Replicas
}

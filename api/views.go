package api

import "time"

// FleetPage is the answer of GET /fleet: one page of the nodes a filter
// selects, and the whole fleet's counts by state, group, backend and
// version, so a view of 10,000 nodes needs neither every node nor a tally
// of its own.
type FleetPage struct {
	// Total, Online and Offline count the whole fleet.
	Total   int `json:"total"`
	Online  int `json:"online"`
	Offline int `json:"offline"`
	// Matched counts the nodes the filter selects; Nodes holds those from
	// Offset, at most Limit of them, sorted by id and without schemas.
	Matched int        `json:"matched"`
	Offset  int        `json:"offset"`
	Limit   int        `json:"limit"`
	Nodes   []NodeInfo `json:"nodes"`
	// Groups counts the nodes in each group and each of its parents
	// (web.prod counts toward web), sorted by name.
	Groups   []GroupCount `json:"groups"`
	Backends []NameCount  `json:"backends"`
	Versions []NameCount  `json:"versions"`
	// Sites counts the nodes of each site (DefaultSite: the controllers'
	// own agents), sorted by name.
	Sites []NameCount `json:"sites"`
	Time  time.Time   `json:"time"`
}

// GroupCount counts the nodes of one group by state.
type GroupCount struct {
	Group   string `json:"group"`
	Total   int    `json:"total"`
	Online  int    `json:"online"`
	Offline int    `json:"offline"`
}

// NameCount counts the nodes that have something (a backend, a version).
type NameCount struct {
	Name  string `json:"name"`
	Nodes int    `json:"nodes"`
}

// JobPage is the answer of GET /jobs/page: one page of job summaries,
// newest first, and the count of every job by status.
type JobPage struct {
	Total   int            `json:"total"`
	Counts  map[string]int `json:"counts"`
	Matched int            `json:"matched"`
	Offset  int            `json:"offset"`
	Limit   int            `json:"limit"`
	Jobs    []JobHead      `json:"jobs"`
}

// JobHead is a job without its params and results: what a list shows.
type JobHead struct {
	ID     string    `json:"id"`
	Status JobStatus `json:"status"`
	Target Target    `json:"target"`
	// SubmittedBy names the token that submitted the job, when the
	// controller records it.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// Tasks names the job's steps (backend.action), in order.
	Tasks      []string   `json:"tasks"`
	Step       int        `json:"step"`
	Nodes      int        `json:"nodes"`
	Error      string     `json:"error,omitempty"`
	Owner      string     `json:"owner,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Sites. A site is a place whose agents reach the hub (the controllers'
// cluster) through one relay: a NATS server in leaf mode that connects out
// to the hub over one TLS link, authenticated with the site's key, and to
// which the site's agents connect as they would to a controller. Every
// node belongs to one site; the hub's own agents to DefaultSite.

// DefaultSite is the site of the agents that connect to a controller
// directly. No site can be created under this name.
const DefaultSite = "default"

// BucketSites holds the sites by name (controllers only).
const BucketSites = "sites"

// Site is a site's record: its name and the public NKey its relay proves
// on the leaf connection. The seed is given once, at creation, in the
// site's credential, and never stored by the hub.
type Site struct {
	Name      string    `json:"name"`
	PublicKey string    `json:"public_key"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by,omitempty"`
	// Revoked sites are refused on the leaf port; their relays are
	// disconnected.
	Revoked   bool      `json:"revoked,omitempty"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// Hosts are the names the relay's server certificate was issued for.
	Hosts []string `json:"hosts,omitempty"`
}

// SiteStatus is a site as GET /sites shows it: its record, how many nodes
// it has, and whether a relay is connected to the controller answering.
type SiteStatus struct {
	Site
	Nodes  int `json:"nodes"`
	Online int `json:"online"`
	// Connected counts the leaf connections of the site's relays on the
	// controllers (as seen by the controller answering, from the node
	// records' freshness when it cannot know).
	Connected bool `json:"connected"`
}

// SiteCreateRequest is the body of POST /site.
type SiteCreateRequest struct {
	Name string `json:"name"`
	// Hosts are the relay's DNS names and addresses its agents connect to;
	// its server certificate names them (and localhost).
	Hosts []string `json:"hosts,omitempty"`
}

// SiteCredential is everything a relay needs, made once by POST /site:
// the site's NKey seed (its secret), the hub's CA, a server certificate
// and key for the relay's agent port issued by the hub's CA (so the site's
// agents trust the same ca.pem as the hub's), and the hub's leaf URLs.
// Whoever holds it can run the site's relay: keep it like a private key
// (the CLI writes it with mode 0600).
type SiteCredential struct {
	Site    string   `json:"site"`
	Seed    string   `json:"seed"`
	CA      string   `json:"ca"`
	Cert    string   `json:"cert"`
	Key     string   `json:"key"`
	HubURLs []string `json:"hub_urls"`
}

// ValidSiteName reports whether name can name a new site: a subject token
// (letters, digits, '_' and '-'), and not DefaultSite.
func ValidSiteName(name string) error {
	if !ValidToken(name) {
		return fmt.Errorf("site name %q is not valid: letters, digits, '_' and '-'", name)
	}
	if name == DefaultSite {
		return fmt.Errorf("site name %q is reserved for the hub's own agents", name)
	}
	return nil
}

// SiteOf is a node's site: DefaultSite when none is recorded.
func SiteOf(site string) string {
	if site == "" {
		return DefaultSite
	}
	return site
}

// Site subjects. A relay may publish on SiteSubjects(site) only (the hub
// enforces it on the leaf connection), so the subject names the site.
//
//	grid.site.<site>.enroll.<key>  an agent's enrollment request, sent on by
//	                               the relay (the agent asked on
//	                               grid.enroll.<key> at the relay)
//	grid.site.<site>.roster        the relay asks for its site's enrollments
//	_GRID_SITE.<site>.>            the relay's inbox: the answers to both
func SiteEnrollSubject(site, key string) string { return "grid.site." + site + ".enroll." + key }

// SiteRosterSubject is where a relay asks for its site's roster.
func SiteRosterSubject(site string) string { return "grid.site." + site + ".roster" }

// SiteSubjects is every subject a relay of the site may publish on for
// itself (besides what its agents send).
func SiteSubjects(site string) string { return "grid.site." + site + ".>" }

// Controllers subscribe to these (queue group) to serve every site.
const (
	SubjectSiteEnrollAll = "grid.site.*.enroll.*"
	SubjectSiteRosterAll = "grid.site.*.roster"
)

// ParseSiteSubject reads the site and, for an enrollment, the key from a
// site subject; ok is false when subject is not one.
func ParseSiteSubject(subject string) (site, kind, key string, ok bool) {
	parts := strings.Split(subject, ".")
	switch {
	case len(parts) == 5 && parts[0] == "grid" && parts[1] == "site" && parts[3] == "enroll":
		return parts[2], "enroll", parts[4], parts[2] != "" && parts[4] != ""
	case len(parts) == 4 && parts[0] == "grid" && parts[1] == "site" && parts[3] == "roster":
		return parts[2], "roster", "", parts[2] != ""
	}
	return "", "", "", false
}

// SiteInboxPrefix is the reply-subject prefix of a relay's own connection
// (nats.CustomInboxPrefix); the hub answers a site's requests only there.
func SiteInboxPrefix(site string) string { return "_GRID_SITE." + site }

// SiteRoster answers a relay's roster request: the enrollments of its
// site (admitted, pending and revoked), from which the relay decides what
// each of its agents' connections may do, exactly as a controller would.
type SiteRoster struct {
	Site        string       `json:"site"`
	Enrollments []Enrollment `json:"enrollments"`
	Error       string       `json:"error,omitempty"`
}

// SiteCommandSubject is where a step for every node of a site is
// broadcast: cmd.site.<site>.<backend>.<action> (the same depth as a
// group's, see GroupToken).
func SiteCommandSubject(site, backend, action string) string {
	return "cmd.site." + site + "." + backend + "." + action
}

// CreateSite makes a site and returns its credential (admin role).
func (c *Client) CreateSite(ctx context.Context, req SiteCreateRequest) (SiteCredential, error) {
	var out SiteCredential
	err := c.do(ctx, http.MethodPost, "/site", req, &out)
	return out, err
}

// ListSites returns every site with its node counts.
func (c *Client) ListSites(ctx context.Context) ([]SiteStatus, error) {
	var out []SiteStatus
	err := c.do(ctx, http.MethodGet, "/sites", nil, &out)
	return out, err
}

// RevokeSite refuses the site's relay from now on and disconnects it
// (admin role).
func (c *Client) RevokeSite(ctx context.Context, name string) (Site, error) {
	var out Site
	err := c.do(ctx, http.MethodDelete, "/site/"+url.PathEscape(name), nil, &out)
	return out, err
}

// NodeSite is the site a node of the job was in when its target was
// resolved (DefaultSite unless NodeSites names another).
func (j *Job) NodeSite(id string) string {
	return SiteOf(j.NodeSites[id])
}

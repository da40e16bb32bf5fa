package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/pki"
)

// setupSites follows the sites bucket and answers relays' requests, then
// lets relays in on the leaf port (refused until the sites are loaded).
func (c *Controller) setupSites(ctx context.Context, s *startup) error {
	kv, err := c.js.KeyValue(ctx, api.BucketSites)
	if err != nil {
		return err
	}
	st := newSites(c.log, c.sec)
	if err := st.watch(s.runCtx, &c.loops, kv); err != nil {
		return err
	}
	subs, err := st.subscribe(c.nc)
	if err != nil {
		return err
	}
	s.subs = append(s.subs, subs...)
	c.sec.sites.Store(st)
	s.onUndo(st.close)
	// Nodes of sites connected straight to this server while the sites
	// were loading got no node's rights (Check): let them come back for
	// them.
	for _, site := range st.list() {
		if !site.Revoked {
			for _, key := range c.sec.siteKeys(site.Name) {
				c.sec.disconnect(key, true)
			}
		}
	}
	if c.ns != nil && c.cfg.LeafAddr != "" {
		c.leafURL = c.advertisedLeafURL()
		c.log.Info("sites' relays may connect", "leaf_url", c.leafURL)
	}
	return nil
}

// advertisedLeafURL is the URL sites' credentials name for this
// controller's leaf port: leaf_advertise, or the listen address (the
// hostname for a wildcard one, the port the server took for port 0).
func (c *Controller) advertisedLeafURL() string {
	if c.cfg.LeafAdvertise != "" {
		return c.cfg.LeafAdvertise
	}
	host, port, _ := net.SplitHostPort(c.cfg.LeafAddr)
	if vz, err := c.ns.Varz(nil); err == nil && vz.LeafNode.Port > 0 {
		port = strconv.Itoa(vz.LeafNode.Port)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return "tls://" + net.JoinHostPort(host, port)
}

// sitesOff answers 404 when this controller has no sites (insecure, or an
// external NATS).
func (c *Controller) sitesOff(w http.ResponseWriter) *sites {
	if c.sec != nil {
		if st := c.sec.sites.Load(); st != nil {
			return st
		}
	}
	writeError(w, http.StatusNotFound, "sites need the embedded server's TLS and authentication; this controller has neither (insecure, or nats_urls)")
	return nil
}

// handleCreateSite serves POST /site: a new site and its credential, which
// holds the site's secret and is shown this once.
func (c *Controller) handleCreateSite(w http.ResponseWriter, r *http.Request) {
	st := c.sitesOff(w)
	if st == nil {
		return
	}
	var req api.SiteCreateRequest
	d := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "site request: "+err.Error())
		return
	}
	if err := api.ValidSiteName(req.Name); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	for i, h := range req.Hosts {
		if !validHostName(h) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("hosts[%d] %q: want a DNS name or an IP address", i, h))
			return
		}
	}
	noteAudit(r, func(n *auditNote) { n.resource, n.params = req.Name, map[string]any{"hosts": req.Hosts} })
	urls := c.hubLeafURLs(r.Context())
	if len(urls) == 0 {
		writeError(w, http.StatusConflict, "no controller accepts relays: start the controllers with leaf_addr (--leaf-addr) first")
		return
	}
	// The relay's certificate for its agents, from the hub's CA, so that
	// the site's agents trust the hub's ca.pem.
	certPEM, keyPEM, err := pki.IssueCert(c.sec.ca, pki.CertSpec{CommonName: "grid site relay " + req.Name,
		Hosts: append([]string{"localhost", "127.0.0.1", "::1"}, req.Hosts...), Server: true})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	site, seed, err := st.create(ctx, req, principalFrom(r.Context()).Name, time.Now().UTC())
	switch {
	case errors.Is(err, errSiteExists):
		writeError(w, http.StatusConflict, fmt.Sprintf("a site named %q exists (grid site list); pick another name", req.Name))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("site created", "site", site.Name, "key", site.PublicKey, "hosts", site.Hosts, "by", site.CreatedBy)
	writeJSON(w, http.StatusCreated, api.SiteCredential{Site: site.Name, Seed: string(seed), CA: string(c.sec.ca.PEM),
		Cert: string(certPEM), Key: string(keyPEM), HubURLs: urls})
}

// hubLeafURLs are the leaf URLs of the controllers online.
func (c *Controller) hubLeafURLs(ctx context.Context) []string {
	var urls []string
	if c.leafURL != "" {
		urls = append(urls, c.leafURL)
	}
	cs, err := c.controllers(ctx)
	if err != nil {
		c.log.Warn("list controllers for a site's hub URLs", "err", err)
	}
	for _, ci := range cs {
		if ci.LeafURL != "" && ci.Status == "online" {
			urls = append(urls, ci.LeafURL)
		}
	}
	slices.Sort(urls)
	return slices.Compact(urls)
}

// handleListSites serves GET /sites.
func (c *Controller) handleListSites(w http.ResponseWriter, r *http.Request) {
	st := c.sitesOff(w)
	if st == nil {
		return
	}
	counts := map[string][2]int{}
	for _, n := range c.reg.list(false) {
		k := counts[n.Site]
		k[0]++
		if n.Status == api.NodeOnline {
			k[1]++
		}
		counts[n.Site] = k
	}
	out := make([]api.SiteStatus, 0)
	for _, s := range st.list() {
		k := counts[s.Name]
		out = append(out, api.SiteStatus{Site: s, Nodes: k[0], Online: k[1], Connected: st.connected(s.Name) > 0})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleRevokeSite serves DELETE /site/{name}.
func (c *Controller) handleRevokeSite(w http.ResponseWriter, r *http.Request) {
	st := c.sitesOff(w)
	if st == nil {
		return
	}
	name := r.PathValue("name")
	noteAudit(r, func(n *auditNote) { n.resource = name })
	s, err := st.revoke(r.Context(), name, time.Now().UTC())
	switch {
	case errors.Is(err, errNoSite):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no site named %q (grid site list shows them)", name))
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	c.log.Info("site revoked", "site", name, "by", principalFrom(r.Context()).Name)
	writeJSON(w, http.StatusOK, s)
}

// validHostName reports whether h can be named in a relay's certificate:
// an IP address or a DNS name without wildcards.
func validHostName(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		// No wildcard: a relay's certificate for *.example.com would
		// cover the controllers' names too.
		if !(r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

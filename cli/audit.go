package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// auditFlags are the filters the audit commands share.
type auditFlags struct {
	since, until              string
	actor, action, node, jobs string
}

func (f *auditFlags) add(cmd *cobra.Command, filters bool) {
	cmd.Flags().StringVar(&f.since, "since", "", "only records at or after this time: RFC 3339 (2026-01-02T15:04:05Z) or an age (90m, 24h, 30d)")
	cmd.Flags().StringVar(&f.until, "until", "", "only records before this time (same forms as --since)")
	if !filters {
		return
	}
	cmd.Flags().StringVar(&f.actor, "actor", "", "only records of this token name (or controller:<id>)")
	cmd.Flags().StringVar(&f.action, "action", "", "only records of this action (job.submit, job.cancel, node.approve, token.create, schedule.tick, auth.denied, ...)")
	cmd.Flags().StringVar(&f.node, "node", "", "only records about this node")
	cmd.Flags().StringVar(&f.jobs, "job", "", "only records about this job")
}

// query reads the flags into a query.
func (f *auditFlags) query(now time.Time) (api.AuditQuery, error) {
	q := api.AuditQuery{Actor: f.actor, Action: f.action, Node: f.node, Job: f.jobs}
	var err error
	if q.Since, err = parseWhen("--since", f.since, now); err != nil {
		return q, err
	}
	if q.Until, err = parseWhen("--until", f.until, now); err != nil {
		return q, err
	}
	return q, nil
}

// parseWhen reads a time: RFC 3339, or an age before now (a Go duration, or
// a number of days such as 30d). Empty is the zero time.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(d); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or an age (90m, 24h, 30d)", flag, s)
}

func newAuditCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, export and verify the audit trail (admin role)",
		Long: `The audit trail records who did what: every change made through the API
(with the token's name and role, the resource, the answer's status and the
params, sensitive values hidden), refused calls, enrollments, each job's
start and end with its per-node outcome, and each schedule tick. Records are
chained by hash: each names the hash of the one before, so 'grid audit
verify' finds a record edited, removed or slipped in.`,
	}
	var lf auditFlags
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List audit records, oldest first (-o json for JSON)",
		Example: `  grid audit list --since 24h
  grid audit list --actor terraform --action job.submit -o json`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			q, err := lf.query(time.Now())
			if err != nil {
				return err
			}
			if limit < 1 {
				return usageErrorf("--limit %d: want at least 1", limit)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			var recs []api.AuditRecord
			err = c.EachAudit(cmd.Context(), q, func(r api.AuditRecord) error {
				recs = append(recs, r)
				if len(recs) >= limit {
					return errEnough
				}
				return nil
			})
			if err != nil && !errors.Is(err, errEnough) {
				return fmt.Errorf("list audit records: %w", err)
			}
			if g.json() {
				if recs == nil {
					recs = []api.AuditRecord{}
				}
				return writeJSON(g.stdout, recs)
			}
			return printAudit(g.stdout, recs)
		}),
	}
	lf.add(list, true)
	list.Flags().IntVar(&limit, "limit", 1000, "at most this many records")

	var ef auditFlags
	export := &cobra.Command{
		Use:   "export",
		Short: "Write audit records as JSON lines, one record a line, oldest first",
		Long: `Write the audit records as JSON lines (one record a line, the fields of GET
/audit), oldest first, to stdout: for archives kept longer than
audit_retention, or for other tools. 'grid audit verify --file' checks an
export's chain.`,
		Example: `  grid audit export --since 2026-01-01T00:00:00Z > audit-2026.jsonl`,
		Args:    exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			q, err := ef.query(time.Now())
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(g.stdout)
			if err := c.EachAudit(cmd.Context(), q, func(r api.AuditRecord) error { return enc.Encode(r) }); err != nil {
				return fmt.Errorf("export audit records: %w", err)
			}
			return nil
		}),
	}
	ef.add(export, true)

	var vf auditFlags
	var file string
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Walk the audit chain and name its first broken link",
		Long: `Walk the audit chain (the controller's, or an export with --file) and check
each record: its hash matches its content, it names the hash of the record
before, and no record is missing between them. The first record read starts
the chain (older ones may have expired after audit_retention). It prints the
number of records and the hash of the last one: kept elsewhere, that hash
lets a later verify show that nothing before it was rewritten. Exit status 1
names the first broken link.`,
		Example: `  grid audit verify
  grid audit verify --file audit-2026.jsonl`,
		Args: exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			var chain api.AuditChain
			var err error
			if file != "" {
				err = verifyFile(file, &chain)
			} else {
				var q api.AuditQuery
				if q, err = vf.query(time.Now()); err != nil {
					return err
				}
				c, cerr := g.client()
				if cerr != nil {
					return cerr
				}
				err = c.EachAudit(cmd.Context(), q, chain.Next)
			}
			var br *api.AuditBreak
			if errors.As(err, &br) {
				if g.json() {
					_ = writeJSON(g.stdout, map[string]any{"ok": false, "checked": chain.Count, "broken_at": br.Seq, "reason": br.Reason})
				}
				return fmt.Errorf("%w (%d records before it are intact)", br, chain.Count)
			}
			if err != nil {
				return fmt.Errorf("verify audit trail: %w", err)
			}
			if g.json() {
				return writeJSON(g.stdout, map[string]any{"ok": true, "checked": chain.Count, "first": chain.First, "last": chain.Last, "last_hash": chain.LastHash})
			}
			if chain.Count == 0 {
				_, _ = fmt.Fprintln(g.stdout, "no audit records")
				return nil
			}
			_, _ = fmt.Fprintf(g.stdout, "audit chain intact: %d records, seq %d to %d; last hash %s\n", chain.Count, chain.First, chain.Last, chain.LastHash)
			return nil
		}),
	}
	vf.add(verify, false)
	verify.Flags().StringVar(&file, "file", "", "verify an export (JSON lines) instead of the controller's trail")
	cmd.AddCommand(list, export, verify)
	return cmd
}

// errEnough stops a listing at --limit.
var errEnough = errors.New("enough records")

// verifyFile checks the chain of an export.
func verifyFile(path string, chain *api.AuditChain) error {
	f, err := os.Open(path) //nolint:gosec // reading the export the user named is the point
	if err != nil {
		return fmt.Errorf("--file: %w", err)
	}
	defer func() { _ = f.Close() }()
	return readAuditLines(f, chain.Next)
}

// readAuditLines decodes JSON lines of audit records.
func readAuditLines(r io.Reader, fn func(api.AuditRecord) error) error {
	br := bufio.NewReader(r)
	for n := 0; ; {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("record %d of the export: %w", n+1, err)
		}
		end := err != nil
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(bytes.TrimSpace(line)) > 0 {
			n++
			var rec api.AuditRecord
			if err := json.Unmarshal(line, &rec); err != nil {
				return fmt.Errorf("record %d of the export: %w", n, err)
			}
			// Other readers of the export (jq, a SIEM) see the line's
			// keys as written, while Go's decoder ignores unknown ones,
			// matches keys whatever their case and keeps the last of
			// repeated ones: a line verified must be the very bytes
			// export writes, or it could show one thing and verify
			// another.
			if canon, err := json.Marshal(rec); err != nil || !bytes.Equal(canon, line) {
				return &api.AuditBreak{Seq: rec.Seq, Reason: fmt.Sprintf("record %d of the export is not as grid audit export writes it "+
					"(a field added, repeated or in another case, or the line reformatted): it was edited", n)}
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if end {
			return nil
		}
	}
}

func printAudit(w io.Writer, recs []api.AuditRecord) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tRESOURCE\tOUTCOME\tDETAIL")
	for _, r := range recs {
		outcome := "-"
		if r.Outcome != 0 {
			outcome = strconv.Itoa(r.Outcome)
		}
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Local().Format(time.RFC3339), orDash(r.Actor), r.Action,
			orDash(r.Resource), outcome, orDash(truncate(r.Detail, 60)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

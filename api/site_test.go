package api

import "testing"

func TestParseSiteSubject(t *testing.T) {
	for _, tc := range []struct {
		subject, site, kind, key string
		ok                       bool
	}{
		{SiteEnrollSubject("paris", "UKEY"), "paris", "enroll", "UKEY", true},
		{SiteRosterSubject("paris"), "paris", "roster", "", true},
		{"grid.site.paris.enroll", "", "", "", false},
		{"grid.site.paris.enroll.a.b", "", "", "", false},
		{"grid.enroll.UKEY", "", "", "", false},
		{"grid.site..roster", "", "", "", false},
	} {
		site, kind, key, ok := ParseSiteSubject(tc.subject)
		if ok != tc.ok || (ok && (site != tc.site || kind != tc.kind || key != tc.key)) {
			t.Errorf("%s: got %q %q %q %v", tc.subject, site, kind, key, ok)
		}
	}
}

package api

import (
	"strings"
	"testing"
)

func TestValidToken(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"job-1", true},
		{"A_b-9", true},
		{"01J9ZK3X", true},
		{strings.Repeat("a", 128), true},
		{"", false},
		{strings.Repeat("a", 129), false},
		{"a.b", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{"a\n", false},
		{"é", false},
		{"a/b", false},
		{"\x00", false},
	}
	for _, c := range cases {
		if got := ValidToken(c.in); got != c.want {
			t.Errorf("ValidToken(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestResultAndProgressSubjects(t *testing.T) {
	cases := []struct{ got, want string }{
		{ResultSubject("j1"), "result.j1"},
		{ResultSubject("job-x"), "result.job-x"},
		{ProgressSubject("j1", 0, "n1"), "progress.j1.0.n1"},
		{ProgressSubject("job-x", 12, "web_01"), "progress.job-x.12.web_01"},
		{NodeCommandSubject("n1", "ping", "echo"), "cmd.node.n1.ping.echo"},
		{ReportSubject("job-x", 12, "web_01"), "report.job-x.12.web_01"},
		{NodeReportSubjects("web_01"), "report.*.*.web_01"},
		{NodeProgressSubjects("web_01"), "progress.*.*.web_01"},
		{NodeRegisterSubject("web_01"), "node.register.web_01"},
		{NodeHeartbeatSubject("web_01"), "node.heartbeat.web_01"},
		{CommandSubject(Target{Scope: ScopeAll}, "ping", "echo"), "cmd.all.ping.echo"},
		{CommandSubject(Target{Scope: ScopeGroup, Value: "web.dev"}, "ping", "echo"), "cmd.group.web~dev.ping.echo"},
		{CommandSubject(Target{Scope: ScopeNode, Value: "n2"}, "file", "write"), "cmd.node.n2.file.write"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("subject %q, want %q", c.got, c.want)
		}
	}
}

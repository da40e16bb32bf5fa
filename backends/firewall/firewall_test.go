package firewall

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	m := api.Params{"port": "22", "source": "10.0.0.0/8"}
	conformance.Run(t, conformance.Suite{
		Backend: New(Options{}),
		Samples: map[string]api.Params{"allow": m, "deny": m, "remove": m},
	})
}

func TestWanted(t *testing.T) {
	for _, tc := range []struct {
		params api.Params
		want   string // the rule's comment, or the error
		nft    string
	}{
		{api.Params{"port": "22"}, "grid:allow:tcp:22:any", `tcp dport 22 accept comment "grid:allow:tcp:22:any"`},
		{api.Params{"port": "0022", "proto": "udp", "source": "10.1.2.3/8"}, "grid:allow:udp:22:10.0.0.0/8",
			`ip saddr 10.0.0.0/8 udp dport 22 accept comment "grid:allow:udp:22:10.0.0.0/8"`},
		{api.Params{"port": "8000-8100", "source": "192.0.2.7"}, "grid:allow:tcp:8000-8100:192.0.2.7/32",
			`ip saddr 192.0.2.7/32 tcp dport 8000-8100 accept comment "grid:allow:tcp:8000-8100:192.0.2.7/32"`},
		{api.Params{"port": "443", "source": "2001:DB8::1/32"}, "grid:allow:tcp:443:2001:db8::/32",
			`ip6 saddr 2001:db8::/32 tcp dport 443 accept comment "grid:allow:tcp:443:2001:db8::/32"`},
		{api.Params{"port": "0"}, "port \"0\"", ""},
		{api.Params{"port": "70000"}, "port \"70000\"", ""},
		{api.Params{"port": "90-80"}, "port range", ""},
		{api.Params{"port": "22", "source": "10.0.0.0/33"}, "not an IP address or prefix", ""},
		{api.Params{"port": "22", "source": "::ffff:10.0.0.1"}, "plain IPv4", ""},
		{api.Params{"port": "22", "source": "1.2.3"}, "not an IP address", ""},
	} {
		r, err := wanted(tc.params, "allow")
		if tc.nft == "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: err = %v, want %q", tc.params, err, tc.want)
			}
			continue
		}
		if err != nil || r.comment() != tc.want || r.nftRule() != tc.nft {
			t.Errorf("%v: %q %q %v, want %q %q", tc.params, r.comment(), r.nftRule(), err, tc.want, tc.nft)
		}
		back, ok := parseComment(r.comment())
		if !ok || back != r {
			t.Errorf("comment %q reads back as %+v", r.comment(), back)
		}
	}
	for _, c := range []string{"", "grid", "grid:accept:tcp:22:any", "other:allow:tcp:22:any", "grid:allow:tcp:22"} {
		if _, ok := parseComment(c); ok {
			t.Errorf("comment %q read as a GRID rule", c)
		}
	}
}

// TestNftablesInNetns runs the backend against the real nft, in a network
// namespace made for the test, so the host's own rules are never touched.
// A table of someone else's in the namespace must come through unchanged.
func TestNftablesInNetns(t *testing.T) {
	if os.Getenv("GRID_HOST_TESTS") != "1" {
		t.Skip("host test: set GRID_HOST_TESTS=1 (or run make host-test) to run nft in a network namespace")
	}
	if os.Geteuid() != 0 {
		t.Skip("host test: making a network namespace needs root")
	}
	for _, p := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("host test: %s is not installed (apt-get install iproute2 nftables)", p)
		}
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	ns := "grid-fwtest-" + hex.EncodeToString(suffix)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("host test: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	nft := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nft %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	foreign := "table inet other {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\ttcp dport 22 drop comment \"grid:allow:tcp:22:any\"\n\t}\n}\n"
	nft(foreign, "-f", "-")

	r := backends.NewRegistry().MustRegister(New(Options{NftCommand: []string{"ip", "netns", "exec", ns, "nft"}}))
	allow, _ := backends.ParseAllowlist([]string{"*"})
	r.SetAllowlist(allow)
	do := func(action string, check bool, p api.Params, changed bool) *backends.Result {
		t.Helper()
		res, err := r.Run(context.Background(), "firewall", &backends.Request{Action: action, CheckMode: check, Params: p})
		if err != nil {
			t.Fatalf("%s %v: %v", action, p, err)
		}
		if res.Changed != changed {
			t.Errorf("%s %v check=%v: changed %v, want %v (%s)", action, p, check, res.Changed, changed, res.Output)
		}
		return res
	}
	listed := func() []string {
		t.Helper()
		res := do("list", false, nil, false)
		b, _ := json.Marshal(res.Facts["rules"])
		var rules []Rule
		_ = json.Unmarshal(b, &rules)
		var out []string
		for _, x := range rules {
			out = append(out, x.comment())
		}
		return out
	}

	if res := do("status", false, nil, false); res.Facts["table"] != false {
		t.Errorf("status before any rule: %v", res.Facts)
	}
	ssh := api.Params{"port": "22", "source": "10.0.0.0/8"}
	do("allow", true, ssh, true)
	if got := listed(); len(got) != 0 {
		t.Fatalf("check mode added %v", got)
	}
	do("allow", false, ssh, true)
	do("allow", false, ssh, false)
	do("deny", false, api.Params{"port": "22"}, true)
	do("deny", false, api.Params{"port": "53", "proto": "udp", "source": "2001:db8::/32"}, true)
	// allow goes before deny, so the narrower allow wins over the deny of
	// everyone else.
	if got, want := strings.Join(listed(), " "), "grid:allow:tcp:22:10.0.0.0/8 grid:deny:tcp:22:any grid:deny:udp:53:2001:db8::/32"; got != want {
		t.Errorf("rules = %s, want %s", got, want)
	}
	// Allowing what is denied replaces the deny.
	do("allow", false, api.Params{"port": "22"}, true)
	if got, want := strings.Join(listed(), " "), "grid:allow:tcp:22:any grid:allow:tcp:22:10.0.0.0/8 grid:deny:udp:53:2001:db8::/32"; got != want {
		t.Errorf("rules = %s, want %s", got, want)
	}
	text := nft("", "list", "table", "inet", Table)
	for _, s := range []string{"ip saddr 10.0.0.0/8 tcp dport 22 accept", "ip6 saddr 2001:db8::/32 udp dport 53 drop", "hook input priority filter; policy accept;"} {
		if !strings.Contains(text, s) {
			t.Errorf("table inet grid lacks %q:\n%s", s, text)
		}
	}
	if res := do("status", false, nil, false); res.Facts["table"] != true || res.Facts["rules"] != 3 {
		t.Errorf("status: %v", res.Facts)
	}
	do("remove", true, ssh, true)
	do("remove", false, ssh, true)
	do("remove", false, ssh, false)
	if got := listed(); len(got) != 2 {
		t.Errorf("after remove: %v", got)
	}
	// On a host where ufw is active, status says so: GRID's allows do not
	// override ufw's drops.
	fake := backends.NewRegistry().MustRegister(New(Options{NftCommand: []string{"ip", "netns", "exec", ns, "nft"}, UfwPath: testbin.Build(t, "testdata/fakeufw")}))
	res, err := fake.Run(context.Background(), "firewall", &backends.Request{Action: "status"})
	if err != nil || res.Facts["ufw"] != "active" || !strings.Contains(res.Output, "ufw is active") {
		t.Errorf("status with ufw active: %v %v", res, err)
	}
	// The other table, even with a rule whose comment looks like GRID's,
	// is as it was.
	if got := nft("", "list", "table", "inet", "other"); got != foreign {
		t.Errorf("table inet other changed:\n%s\nwant\n%s", got, foreign)
	}
}

package net

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	stdnet "net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// fakePing returns a backend using the fake ping and the file its argv
// goes to.
func fakePing(t *testing.T) (*Backend, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "argv.log")
	t.Setenv("FAKE_PING_LOG", log)
	return New(Options{PingPath: testbin.Build(t, "testdata/fakeping"), ResolvConfPath: filepath.Join(t.TempDir(), "resolv.conf")}), log
}

func TestConformance(t *testing.T) {
	b, _ := fakePing(t)
	conformance.Run(t, conformance.Suite{
		Backend: b,
		Samples: map[string]api.Params{
			"ping":    {"host": "example.org"},
			"dns_set": {"servers": "192.0.2.53"},
		},
		Blocking: func(*testing.T) *backends.Request {
			return &backends.Request{Action: "ping", Params: api.Params{"host": "block.example"}}
		},
		Literal: func(t *testing.T, action, param, value string) {
			t.Errorf("%s.%s accepted %q", action, param, value)
		},
	})
}

func TestHostPattern(t *testing.T) {
	a, _ := New(Options{}).Schema().Action("ping")
	host, _ := a.Param("host")
	count, _ := a.Param("count")
	for _, tc := range []struct {
		p    api.ParamSchema
		v    string
		good bool
	}{
		{host, "example.org", true}, {host, "web-1", true}, {host, "192.0.2.1", true}, {host, "2001:db8::1", true}, {host, "::1", true},
		{host, "-c", false}, {host, "a b", false}, {host, "a;b", false}, {host, "a..b", false}, {host, "-web", false}, {host, "web-", false}, {host, "$(x)", false},
		{count, "1", true}, {count, "10", true}, {count, "0", false}, {count, "11", false}, {count, "-1", false},
	} {
		if err := tc.p.CheckValue(tc.v); (err == nil) != tc.good {
			t.Errorf("%s %q: err %v, want valid=%v", tc.p.Name, tc.v, err, tc.good)
		}
	}
}

func TestPing(t *testing.T) {
	b, log := fakePing(t)
	r := backends.NewRegistry().MustRegister(b)
	res, err := r.Run(context.Background(), "net", &backends.Request{Action: "ping", Params: api.Params{"host": "example.org", "count": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Facts["received"] != 2 || res.Facts["transmitted"] != 2 || res.Facts["rtt_avg_ms"] != 0.05 || res.Facts["loss_pct"] != 0.0 {
		t.Errorf("facts = %v", res.Facts)
	}
	if res.Changed {
		t.Errorf("ping reported a change")
	}
	res, err = r.Run(context.Background(), "net", &backends.Request{Action: "ping", Params: api.Params{"host": "unreachable.example", "count": "2"}})
	if err == nil || !strings.Contains(err.Error(), "no reply") || res.Facts["loss_pct"] != 100.0 {
		t.Errorf("unreachable: %v %+v", err, res)
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	var argv []string
	if err := json.Unmarshal(sc.Bytes(), &argv); err != nil {
		t.Fatal(err)
	}
	if want := []string{"-n", "-c", "2", "-W", "2", "--", "example.org"}; !slices.Equal(argv, want) {
		t.Errorf("argv = %q, want %q", argv, want)
	}
}

// With no ping binary configured, ping sends its own echo requests: to
// the loopback addresses they are answered, or, where the kernel allows
// the agent neither ICMP socket kind, the error says why.
func TestICMPPing(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no ping(8) to fall back on
	r := backends.NewRegistry().MustRegister(New(Options{}))
	for _, host := range []string{"127.0.0.1", "localhost", "::1"} {
		t.Run(host, func(t *testing.T) {
			res, err := r.Run(context.Background(), "net", &backends.Request{Action: "ping", Params: api.Params{"host": host, "count": "3"}})
			if errors.Is(err, ErrICMPNotPermitted) {
				if !strings.Contains(err.Error(), "ping_group_range") || !strings.Contains(err.Error(), "CAP_NET_RAW") {
					t.Errorf("the error does not say what to change: %v", err)
				}
				t.Skipf("this host allows no ICMP socket: %v", err)
			}
			if host == "::1" && err != nil && strings.Contains(err.Error(), "address") {
				t.Skipf("no IPv6 loopback: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			f := res.Facts
			if f["transmitted"] != 3 || f["received"] != 3 || f["loss_pct"] != 0.0 || res.Changed {
				t.Errorf("facts %v", f)
			}
			if m := f["method"]; m != "icmp-datagram" && m != "icmp-raw" {
				t.Errorf("method %v", m)
			}
			if lo, hi := f["rtt_min_ms"].(float64), f["rtt_max_ms"].(float64); lo <= 0 || hi < lo {
				t.Errorf("rtt %v..%v", lo, hi)
			}
			t.Logf("%s: %s via %s", host, res.Output, f["method"])
		})
	}
}

// An agent the kernel allows no ICMP socket gets an error that says what
// to change: the test runs itself again as nobody (without CAP_NET_RAW),
// on a kernel whose ping_group_range leaves nobody's group out.
func TestICMPNotPermitted(t *testing.T) {
	if os.Getenv("NET_TEST_ICMP_CHILD") == "1" {
		_, err := New(Options{}).Run(context.Background(), &backends.Request{Action: "ping", Params: api.Params{"host": "127.0.0.1", "count": "1"}})
		if !errors.Is(err, ErrICMPNotPermitted) || !strings.Contains(err.Error(), "ping_group_range") || !strings.Contains(err.Error(), "CAP_NET_RAW") {
			t.Fatalf("as nobody: %v", err)
		}
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as nobody")
	}
	const nobody = 65534
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ping_group_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo <= nobody && nobody <= hi {
			t.Skipf("this kernel lets group %d open ICMP sockets (ping_group_range %s)", nobody, strings.TrimSpace(string(b)))
		}
	}
	// The test binary must be reachable by nobody.
	bin := filepath.Join(t.TempDir(), "net.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	// Only the test's own directories are opened up, never the temp root
	// or anything above it.
	if st, err := os.Stat(os.TempDir()); err != nil || st.Mode().Perm()&0o001 == 0 {
		t.Skipf("%s is closed to other users", os.TempDir())
	}
	for d := filepath.Dir(bin); strings.HasPrefix(d, filepath.Clean(os.TempDir())+"/"); d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestICMPNotPermitted$", "-test.v")
	cmd.Env = append(os.Environ(), "NET_TEST_ICMP_CHILD=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestICMPNotPermitted") {
		t.Fatalf("the child did not run the check:\n%s", out)
	}
}

func TestDNS(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(path, []byte("# from DHCP\nnameserver 10.0.0.1\ndomain old.example\noptions edns0 timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := backends.NewRegistry().MustRegister(New(Options{ResolvConfPath: path}))
	// dns_set is dangerous: off unless the allow list names it.
	allow, _ := backends.ParseAllowlist([]string{"net"})
	r.SetAllowlist(allow)
	run := func(action string, check bool, p api.Params) *backends.Result {
		t.Helper()
		res, err := r.Run(context.Background(), "net", &backends.Request{Action: action, CheckMode: check, Params: p})
		if err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		return res
	}
	res := run("dns_get", false, nil)
	if !slices.Equal(res.Facts["servers"].([]string), []string{"10.0.0.1"}) || !slices.Equal(res.Facts["search"].([]string), []string{"old.example"}) {
		t.Errorf("dns_get facts = %v", res.Facts)
	}
	set := api.Params{"servers": "192.0.2.53, 2001:db8::53", "search": "corp.example,example.org"}
	before, _ := os.ReadFile(path)
	if res := run("dns_set", true, set); !res.Changed {
		t.Errorf("check mode: no change reported")
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("check mode changed the file")
	}
	if res := run("dns_set", false, set); !res.Changed {
		t.Errorf("dns_set: no change reported")
	}
	got, _ := os.ReadFile(path)
	want := "# Managed by grid (net.dns_set); local changes are overwritten.\nnameserver 192.0.2.53\nnameserver 2001:db8::53\nsearch corp.example example.org\noptions edns0 timeout:2\n"
	if string(got) != want {
		t.Errorf("file =\n%s\nwant\n%s", got, want)
	}
	if res := run("dns_set", false, set); res.Changed {
		t.Errorf("dns_set again: change reported")
	}
	if res := run("dns_set", true, set); res.Changed {
		t.Errorf("dns_set check again: change reported")
	}
	// Omitting search clears it.
	if res := run("dns_set", false, api.Params{"servers": "192.0.2.53,2001:db8::53"}); !res.Changed {
		t.Errorf("clearing search: no change reported")
	}
	if c, _ := ReadResolvConf(path); len(c.Search) != 0 {
		t.Errorf("search = %v after clearing", c.Search)
	}
	for _, bad := range []string{"1.2.3.4,1.2.3.5,1.2.3.6,1.2.3.7", "999.1.1.1", "1:2:3"} {
		_, err := r.Run(context.Background(), "net", &backends.Request{Action: "dns_set", Params: api.Params{"servers": bad}})
		if err == nil {
			t.Errorf("servers %q accepted", bad)
		}
	}
}

// A missing resolv.conf reads as empty and dns_set creates it.
func TestDNSMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	b := New(Options{ResolvConfPath: path})
	res, err := b.Run(context.Background(), &backends.Request{Action: "dns_get"})
	if err != nil || len(res.Facts["servers"].([]string)) != 0 {
		t.Fatalf("dns_get: %v %+v", err, res)
	}
	res, err = b.Run(context.Background(), &backends.Request{Action: "dns_set", Params: api.Params{"servers": "192.0.2.1"}})
	if err != nil || !res.Changed {
		t.Fatalf("dns_set: %v %+v", err, res)
	}
	if c, _ := ReadResolvConf(path); !slices.Equal(c.Servers, []string{"192.0.2.1"}) {
		t.Errorf("servers = %v", c.Servers)
	}
}

// Through a symlink, dns_set writes the target and keeps the link.
func TestDNSSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.conf")
	link := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(target, []byte("nameserver 10.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	b := New(Options{ResolvConfPath: link})
	if _, err := b.Run(context.Background(), &backends.Request{Action: "dns_set", Params: api.Params{"servers": "192.0.2.1"}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced: %v", err)
	}
	if c, _ := ReadResolvConf(target); !slices.Equal(c.Servers, []string{"192.0.2.1"}) {
		t.Errorf("target servers = %v", c.Servers)
	}
}

func TestParseSockAddr(t *testing.T) {
	for _, tc := range []struct {
		in   string
		addr string
		port int
	}{
		{"0100007F:1F90", "127.0.0.1", 8080},
		{"00000000:0016", "0.0.0.0", 22},
		{"00000000000000000000000001000000:0050", "::1", 80},
		{"0000000000000000FFFF00000100007F:0016", "127.0.0.1", 22},
		{"B80D0120000000000000000001000000:01BB", "2001:db8::1", 443},
	} {
		a, p, err := parseSockAddr(tc.in)
		if err != nil || a.String() != tc.addr || p != tc.port {
			t.Errorf("%s: %v %d %v, want %s %d", tc.in, a, p, err, tc.addr, tc.port)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007:1F90", "zz00007F:1F90", "0100007F:xyz"} {
		if _, _, err := parseSockAddr(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The sockets this test opens are found, with this process as their owner.
func TestPort(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New(Options{}))
	port := func(p api.Params) (*backends.Result, error) {
		return r.Run(context.Background(), "net", &backends.Request{Action: "port", Params: p, CheckMode: true})
	}
	tcp, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := stdnet.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	self, _ := os.ReadFile("/proc/self/comm")
	for _, tc := range []struct {
		proto string
		port  int
	}{
		{"tcp", tcp.Addr().(*stdnet.TCPAddr).Port},
		{"udp", udp.LocalAddr().(*stdnet.UDPAddr).Port},
	} {
		res, err := port(api.Params{"port": strconv.Itoa(tc.port), "protocol": tc.proto})
		if err != nil {
			t.Fatalf("%s %d: %v", tc.proto, tc.port, err)
		}
		ls := res.Facts["listeners"].([]any)
		if len(ls) != 1 || res.Facts["listening"] != true {
			t.Fatalf("%s %d: %v", tc.proto, tc.port, res.Facts)
		}
		l := ls[0].(map[string]any)
		if l["address"] != "127.0.0.1" || l["pid"] != os.Getpid() || l["process"] != strings.TrimSpace(string(self)) || l["uid"] != os.Getuid() {
			t.Errorf("%s %d: listener %v", tc.proto, tc.port, l)
		}
	}
	// Every listener, ours among them.
	res, err := port(api.Params{})
	if err != nil || !strings.Contains(res.Output, fmt.Sprintf("127.0.0.1:%d", tcp.Addr().(*stdnet.TCPAddr).Port)) {
		t.Errorf("all listeners: %v\n%s", err, res.Output)
	}
	// A port closed again listens no more.
	gone, _ := stdnet.Listen("tcp", "127.0.0.1:0")
	gonePort := gone.Addr().(*stdnet.TCPAddr).Port
	gone.Close()
	res, err = port(api.Params{"port": strconv.Itoa(gonePort)})
	if err == nil || res.Facts["listening"] != false {
		t.Errorf("closed port %d: %v %v", gonePort, res.Facts, err)
	}
	for _, bad := range []string{"0", "65536", "-1"} {
		if _, err := port(api.Params{"port": bad}); !errors.Is(err, backends.ErrInvalidParams) {
			t.Errorf("port %s: %v", bad, err)
		}
	}
}

func TestInterfaces(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New(Options{}))
	res, err := r.Run(context.Background(), "net", &backends.Request{Action: "interfaces", CheckMode: true})
	if err != nil {
		t.Fatal(err)
	}
	var lo map[string]any
	for _, i := range res.Facts["interfaces"].([]any) {
		if m := i.(map[string]any); m["loopback"] == true {
			lo = m
		}
	}
	if lo == nil || lo["up"] != true || lo["mtu"].(int) <= 0 || !slices.Contains(lo["addresses"].([]string), "127.0.0.1/8") {
		t.Errorf("loopback: %v\n%s", lo, res.Output)
	}
}

// A cancelled ICMP ping returns at once, between probes or waiting for a
// reply, with the cancellation as its error.
func TestICMPPingCancel(t *testing.T) {
	r := backends.NewRegistry().MustRegister(New(Options{}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Ten probes take about two seconds (probeGap apart).
		_, err := r.Run(ctx, "net", &backends.Request{Action: "ping", Params: api.Params{"host": "127.0.0.1", "count": "10"}})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if errors.Is(err, ErrICMPNotPermitted) {
			t.Skipf("this host allows no ICMP socket: %v", err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled ping: %v, want context.Canceled", err)
		}
	case <-time.After(time.Second):
		t.Fatal("ping still running a second after cancellation")
	}
}

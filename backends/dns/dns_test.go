package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/conformance"
)

// zone is what the test's DNS server answers, by name and type. A name
// with a CNAME answers every type with the CNAME and the target's records.
var zone = map[string]map[dnsmessage.Type][]dnsmessage.ResourceBody{
	"web.grid.test.": {
		dnsmessage.TypeA:    {&dnsmessage.AResource{A: [4]byte{192, 0, 2, 11}}, &dnsmessage.AResource{A: [4]byte{192, 0, 2, 10}}},
		dnsmessage.TypeAAAA: {&dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::10").As16()}},
	},
	"alias.grid.test.": {dnsmessage.TypeCNAME: {&dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("web.grid.test.")}}},
	"grid.test.": {
		dnsmessage.TypeMX:  {&dnsmessage.MXResource{Pref: 10, MX: dnsmessage.MustNewName("mail.grid.test.")}},
		dnsmessage.TypeTXT: {&dnsmessage.TXTResource{TXT: []string{"v=spf1 -all"}}},
		dnsmessage.TypeNS:  {&dnsmessage.NSResource{NS: dnsmessage.MustNewName("ns1.grid.test.")}},
	},
	"_http._tcp.grid.test.":    {dnsmessage.TypeSRV: {&dnsmessage.SRVResource{Priority: 1, Weight: 5, Port: 8080, Target: dnsmessage.MustNewName("web.grid.test.")}}},
	"10.2.0.192.in-addr.arpa.": {dnsmessage.TypePTR: {&dnsmessage.PTRResource{PTR: dnsmessage.MustNewName("web.grid.test.")}}},
}

// serve answers queries on a loopback UDP socket from zone until the test
// ends; its address is returned.
func serve(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out, err := answer(buf[:n]); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func answer(q []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	question, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(question.Name.String())
	type rr struct {
		name string
		body dnsmessage.ResourceBody
	}
	var answers []rr
	records, known := zone[name]
	if c, ok := records[dnsmessage.TypeCNAME]; ok {
		answers = append(answers, rr{name, c[0]})
		if question.Type != dnsmessage.TypeCNAME {
			target := c[0].(*dnsmessage.CNAMEResource).CNAME.String()
			for _, b := range zone[target][question.Type] {
				answers = append(answers, rr{target, b})
			}
		}
	} else {
		for _, b := range records[question.Type] {
			answers = append(answers, rr{name, b})
		}
	}
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(question); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range answers {
		rh := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(a.name), Class: dnsmessage.ClassINET, TTL: 60}
		switch body := a.body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(rh, *body)
		case *dnsmessage.AAAAResource:
			err = b.AAAAResource(rh, *body)
		case *dnsmessage.CNAMEResource:
			err = b.CNAMEResource(rh, *body)
		case *dnsmessage.MXResource:
			err = b.MXResource(rh, *body)
		case *dnsmessage.TXTResource:
			err = b.TXTResource(rh, *body)
		case *dnsmessage.NSResource:
			err = b.NSResource(rh, *body)
		case *dnsmessage.SRVResource:
			err = b.SRVResource(rh, *body)
		case *dnsmessage.PTRResource:
			err = b.PTRResource(rh, *body)
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func run(t *testing.T, action string, p api.Params) (*backends.Result, error) {
	t.Helper()
	r := backends.NewRegistry().MustRegister(New())
	res, err := r.Run(context.Background(), "dns", &backends.Request{Action: action, Params: p, CheckMode: true})
	if res != nil && res.Changed {
		t.Errorf("%s reports a change", action)
	}
	return res, err
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Suite{
		Backend: New(),
		Samples: map[string]api.Params{
			"lookup":  {"name": "example.com"},
			"reverse": {"address": "192.0.2.1"},
			"check":   {"name": "example.com", "expect": "192.0.2.1"},
		},
		// A server that reads queries and never answers.
		Blocking: func(t *testing.T) *backends.Request {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pc.Close() })
			return &backends.Request{Action: "lookup", Params: api.Params{"name": "web.grid.test", "server": pc.LocalAddr().String(), "timeout": "1m"}}
		},
	})
}

func TestLookup(t *testing.T) {
	server := serve(t)
	for _, tc := range []struct {
		name, typ string
		want      []any
	}{
		{"web.grid.test", "A", []any{"192.0.2.10", "192.0.2.11"}},
		{"web.grid.test.", "AAAA", []any{"2001:db8::10"}},
		{"alias.grid.test", "CNAME", []any{"web.grid.test."}},
		{"alias.grid.test", "A", []any{"192.0.2.10", "192.0.2.11"}},
		{"grid.test", "MX", []any{map[string]any{"host": "mail.grid.test.", "pref": 10}}},
		{"grid.test", "TXT", []any{"v=spf1 -all"}},
		{"grid.test", "NS", []any{"ns1.grid.test."}},
		{"_http._tcp.grid.test", "SRV", []any{map[string]any{"target": "web.grid.test.", "port": 8080, "priority": 1, "weight": 5}}},
	} {
		t.Run(tc.typ+" "+tc.name, func(t *testing.T) {
			res, err := run(t, "lookup", api.Params{"name": tc.name, "type": tc.typ, "server": server})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(res.Facts["records"], tc.want) {
				t.Errorf("records %#v, want %#v", res.Facts["records"], tc.want)
			}
			if res.Facts["server"] != server {
				t.Errorf("server fact %v", res.Facts["server"])
			}
		})
	}
	for _, tc := range []struct{ name, typ string }{{"nowhere.grid.test", "A"}, {"grid.test", "A"}, {"web.grid.test", "MX"}} {
		if res, err := run(t, "lookup", api.Params{"name": tc.name, "type": tc.typ, "server": server}); err == nil {
			t.Errorf("%s %s: %v", tc.typ, tc.name, res.Facts)
		}
	}
}

func TestReverse(t *testing.T) {
	server := serve(t)
	res, err := run(t, "reverse", api.Params{"address": "192.0.2.10", "server": server})
	if err != nil || !reflect.DeepEqual(res.Facts["names"], []string{"web.grid.test."}) {
		t.Errorf("reverse: %v %v", res.Facts, err)
	}
	if _, err := run(t, "reverse", api.Params{"address": "192.0.2.99", "server": server}); err == nil {
		t.Errorf("reverse of an address without a PTR succeeded")
	}
}

func TestCheck(t *testing.T) {
	server := serve(t)
	for _, tc := range []struct {
		name, expect string
		exact        bool
		ok           bool
	}{
		{"web.grid.test", "192.0.2.10", false, true},
		{"web.grid.test", "192.0.2.10,192.0.2.11,2001:db8::10", true, true},
		{"web.grid.test", "192.0.2.10", true, false},
		{"web.grid.test", "192.0.2.12", false, false},
		{"alias.grid.test", "2001:db8:0::10", false, true},
	} {
		p := api.Params{"name": tc.name, "expect": tc.expect, "server": server}
		if tc.exact {
			p["exact"] = "true"
		}
		res, err := run(t, "check", p)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrMismatch)) || res.Facts["ok"] != tc.ok {
			t.Errorf("%s → %s (exact %v): %v %v", tc.name, tc.expect, tc.exact, res.Facts, err)
		}
	}
	res, err := run(t, "check", api.Params{"name": "web.grid.test", "expect": "192.0.2.10,192.0.2.99", "server": server})
	if !reflect.DeepEqual(res.Facts["missing"], []string{"192.0.2.99"}) || !errors.Is(err, ErrMismatch) {
		t.Errorf("missing: %v %v", res.Facts, err)
	}
	if _, err := run(t, "check", api.Params{"name": "nowhere.grid.test", "expect": "192.0.2.1", "server": server}); err == nil || errors.Is(err, ErrMismatch) {
		t.Errorf("unknown name: %v", err)
	}
}

func TestServerParam(t *testing.T) {
	for _, tc := range []struct {
		server, addr string
		ok           bool
	}{
		{"192.0.2.53", "192.0.2.53:53", true},
		{"192.0.2.53:5353", "192.0.2.53:5353", true},
		{"[2001:db8::53]:5353", "[2001:db8::53]:5353", true},
		{"2001:db8::53", "[2001:db8::53]:53", true},
		{"192.0.2.53:0", "", false},
		{"192.0.2.53:99999", "", false},
		{"999.0.0.1", "", false},
	} {
		_, addr, err := resolver(tc.server)
		if tc.ok != (err == nil) || addr != tc.addr {
			t.Errorf("%s: %q %v", tc.server, addr, err)
		}
	}
}

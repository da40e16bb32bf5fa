package net

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	stdnet "net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/gridfleet/terraform-provider-grid/backends"
)

// ErrICMPNotPermitted says the kernel let the agent open neither kind of
// ICMP socket.
var ErrICMPNotPermitted = errors.New("ICMP sockets not permitted")

// ReplyTimeout is how long a ping waits for each reply.
const ReplyTimeout = 2 * time.Second

// probeGap is the least time between two echo requests.
const probeGap = 200 * time.Millisecond

// icmpConn opens an ICMP endpoint for addr's family: an unprivileged
// datagram socket where net.ipv4.ping_group_range lets the agent's group
// have one, else a raw socket (root, or CAP_NET_RAW). method names which.
func icmpConn(addr netip.Addr) (c *icmp.PacketConn, method string, err error) {
	dgram, raw, wildcard := "udp4", "ip4:icmp", "0.0.0.0"
	if addr.Is6() {
		dgram, raw, wildcard = "udp6", "ip6:ipv6-icmp", "::"
	}
	c, derr := icmp.ListenPacket(dgram, wildcard)
	if derr == nil {
		return c, "icmp-datagram", nil
	}
	c, rerr := icmp.ListenPacket(raw, wildcard)
	if rerr == nil {
		return c, "icmp-raw", nil
	}
	if permission(derr) && permission(rerr) {
		return nil, "", fmt.Errorf("%w: the kernel refuses an unprivileged ICMP socket to group %d (sysctl net.ipv4.ping_group_range) and a raw one to a process without CAP_NET_RAW: %w",
			ErrICMPNotPermitted, os.Getgid(), errors.Join(derr, rerr))
	}
	return nil, "", fmt.Errorf("open an ICMP socket: %w", errors.Join(derr, rerr))
}

func permission(err error) bool {
	return errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, os.ErrPermission)
}

// icmpPing sends count echo requests to host from the agent itself, with
// no ping program: each waits up to ReplyTimeout for its reply.
func icmpPing(ctx context.Context, host string, count int) (*backends.Result, error) {
	facts := map[string]any{"host": host}
	addrs, err := stdnet.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return &backends.Result{Facts: facts}, fmt.Errorf("ping %s: %w", host, errCtx(ctx, err))
	}
	// IPv4 first, as ping(8) does for a name with both.
	addr := addrs[0].Unmap()
	for _, a := range addrs {
		if a.Unmap().Is4() {
			addr = a.Unmap()
			break
		}
	}
	facts["address"] = addr.String()
	c, method, err := icmpConn(addr)
	if err != nil {
		return &backends.Result{Facts: facts}, fmt.Errorf("ping %s: %w", host, err)
	}
	defer c.Close()
	facts["method"] = method
	// Cancellation unblocks a read at once.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var dst stdnet.Addr = &stdnet.IPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	if method == "icmp-datagram" {
		dst = &stdnet.UDPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	}
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if addr.Is6() {
		reqType, replyType, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	// A token in each request's body tells its reply from others a raw
	// socket sees (every ICMP packet to the host).
	token := make([]byte, 16)
	_, _ = rand.Read(token)
	id := int(token[0])<<8 | int(token[1])
	var rtts []float64
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		sent := time.Now()
		msg, err := (&icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: token}}).Marshal(nil)
		if err != nil {
			return nil, fmt.Errorf("ping %s: %w", host, err)
		}
		if _, err := c.WriteTo(msg, dst); err != nil {
			if ctx.Err() != nil {
				return pingResult(facts, count, rtts), fmt.Errorf("ping %s: %w", host, context.Cause(ctx))
			}
			return pingResult(facts, count, rtts), fmt.Errorf("ping %s: send: %w", host, err)
		}
		deadline := sent.Add(ReplyTimeout)
		for {
			if err := c.SetReadDeadline(deadline); err != nil {
				return nil, fmt.Errorf("ping %s: %w", host, err)
			}
			n, _, err := c.ReadFrom(buf)
			if ctx.Err() != nil {
				return pingResult(facts, count, rtts), fmt.Errorf("ping %s: %w", host, context.Cause(ctx))
			}
			if err != nil {
				var ne stdnet.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break // this probe got no reply
				}
				return pingResult(facts, count, rtts), fmt.Errorf("ping %s: receive: %w", host, err)
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != replyType {
				continue
			}
			echo, ok := m.Body.(*icmp.Echo)
			// A datagram socket's kernel sets the id; the token and seq
			// identify the reply either way.
			if !ok || echo.Seq != seq || !bytes.Equal(echo.Data, token) {
				continue
			}
			rtts = append(rtts, float64(time.Since(sent).Microseconds())/1000)
			break
		}
		if seq < count {
			wait := time.Until(sent.Add(probeGap))
			select {
			case <-ctx.Done():
				return pingResult(facts, count, rtts), fmt.Errorf("ping %s: %w", host, context.Cause(ctx))
			case <-time.After(wait):
			}
		}
	}
	res := pingResult(facts, count, rtts)
	if len(rtts) == 0 {
		return res, fmt.Errorf("ping %s: no reply", host)
	}
	return res, nil
}

func pingResult(facts map[string]any, tx int, rtts []float64) *backends.Result {
	rx := len(rtts)
	facts["transmitted"], facts["received"] = tx, rx
	facts["loss_pct"] = float64(tx-rx) * 100 / float64(tx)
	line := fmt.Sprintf("%d packets transmitted, %d received, %.0f%% packet loss", tx, rx, facts["loss_pct"])
	if rx > 0 {
		lo, hi, sum := math.Inf(1), 0.0, 0.0
		for _, r := range rtts {
			lo, hi, sum = math.Min(lo, r), math.Max(hi, r), sum+r
		}
		facts["rtt_min_ms"], facts["rtt_avg_ms"], facts["rtt_max_ms"] = lo, round3(sum/float64(rx)), hi
		line += fmt.Sprintf("; rtt min/avg/max %.3f/%.3f/%.3f ms", lo, sum/float64(rx), hi)
	}
	return &backends.Result{Output: line, Facts: facts}
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func errCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(err, context.Cause(ctx))
	}
	return err
}

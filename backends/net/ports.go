package net

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	stdnet "net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/procfs"
)

// Listener is one socket listening (TCP) or bound (UDP) on the node, from
// /proc/net, with the process holding it when it can be found.
type Listener struct {
	Protocol string
	Address  netip.Addr
	Port     int
	Inode    uint64
	UID      int
	PID      int
	Process  string
}

func (l Listener) facts() map[string]any {
	return map[string]any{"protocol": l.Protocol, "address": l.Address.String(), "port": l.Port,
		"uid": l.UID, "pid": l.PID, "process": l.Process}
}

// Listeners reads /proc/net/{tcp,tcp6} (state LISTEN) or {udp,udp6}
// (unconnected sockets) under root, and finds each socket's process by
// the socket inodes in /proc/PID/fd.
func Listeners(root, protocol string) ([]Listener, error) {
	var out []Listener
	for _, file := range []string{protocol, protocol + "6"} {
		ls, err := readSockets(filepath.Join(root, "net", file), protocol)
		if os.IsNotExist(err) && strings.HasSuffix(file, "6") {
			continue // no IPv6 on this kernel
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ls...)
	}
	owners := socketOwners(root)
	for i := range out {
		if o, ok := owners[out[i].Inode]; ok {
			out[i].PID, out[i].Process = o.PID, o.Name
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Port != out[j].Port {
			return out[i].Port < out[j].Port
		}
		return out[i].Address.Less(out[j].Address)
	})
	return out, nil
}

func readSockets(path, protocol string) ([]Listener, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// TCP_LISTEN is 0A; an unconnected UDP socket is TCP_CLOSE, 07.
	want := "0A"
	if protocol == "udp" {
		want = "07"
	}
	var out []Listener
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || fl[3] != want {
			continue
		}
		addr, port, err := parseSockAddr(fl[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		uid, _ := strconv.Atoi(fl[7])
		inode, _ := strconv.ParseUint(fl[9], 10, 64)
		out = append(out, Listener{Protocol: protocol, Address: addr, Port: port, UID: uid, Inode: inode})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// parseSockAddr reads "0100007F:1F90": the address as 32-bit words in the
// kernel's byte order (little-endian here), the port in hex.
func parseSockAddr(s string) (netip.Addr, int, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.Addr{}, 0, fmt.Errorf("bad socket address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.Addr{}, 0, fmt.Errorf("bad socket address %q", s)
	}
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(raw)
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("bad socket port %q", s)
	}
	return addr.Unmap(), int(port), nil
}

// socketOwners maps socket inodes to the process holding them. Processes
// whose fds the agent may not read (it runs as root on a node) are left
// out.
func socketOwners(root string) map[uint64]procfs.Process {
	out := map[uint64]procfs.Process{}
	procs, err := procfs.List(root)
	if err != nil {
		return out
	}
	for _, p := range procs {
		fdDir := filepath.Join(root, strconv.Itoa(p.PID), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			if in, ok := strings.CutPrefix(target, "socket:["); ok {
				if n, err := strconv.ParseUint(strings.TrimSuffix(in, "]"), 10, 64); err == nil {
					if _, seen := out[n]; !seen {
						out[n] = p
					}
				}
			}
		}
	}
	return out
}

func (b *Backend) ports(protocol, portParam string) (*backends.Result, error) {
	ls, err := Listeners(b.procRoot, protocol)
	if err != nil {
		return nil, fmt.Errorf("read listening sockets: %w", err)
	}
	port := 0
	if portParam != "" {
		port, _ = strconv.Atoi(portParam)
		var match []Listener
		for _, l := range ls {
			if l.Port == port {
				match = append(match, l)
			}
		}
		ls = match
	}
	list := make([]any, len(ls))
	var out strings.Builder
	for i, l := range ls {
		list[i] = l.facts()
		proc := l.Process
		if proc == "" {
			proc = "?"
		}
		fmt.Fprintf(&out, "%s %s %s/%d\n", protocol, stdnet.JoinHostPort(l.Address.String(), strconv.Itoa(l.Port)), proc, l.PID)
	}
	facts := map[string]any{"protocol": protocol, "listeners": list, "listening": len(ls) > 0}
	res := &backends.Result{Output: strings.TrimSpace(out.String()), Facts: facts}
	if port != 0 {
		facts["port"] = port
		if len(ls) == 0 {
			res.Output = fmt.Sprintf("nothing listens on %s port %d", protocol, port)
			return res, fmt.Errorf("nothing listens on %s port %d", protocol, port)
		}
	}
	return res, nil
}

// interfaces lists the network interfaces with their addresses, MTU and
// state (operstate from /sys/class/net).
func interfaces() (*backends.Result, error) {
	ifs, err := stdnet.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	list := make([]any, 0, len(ifs))
	var out strings.Builder
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", ifc.Name, err)
		}
		as := make([]string, 0, len(addrs))
		for _, a := range addrs {
			as = append(as, a.String())
		}
		state := "unknown"
		if b, err := os.ReadFile(filepath.Join("/sys/class/net", ifc.Name, "operstate")); err == nil {
			state = strings.TrimSpace(string(b))
		}
		list = append(list, map[string]any{
			"name": ifc.Name, "index": ifc.Index, "mtu": ifc.MTU, "mac": ifc.HardwareAddr.String(),
			"up": ifc.Flags&stdnet.FlagUp != 0, "loopback": ifc.Flags&stdnet.FlagLoopback != 0,
			"running": ifc.Flags&stdnet.FlagRunning != 0, "state": state, "flags": ifc.Flags.String(), "addresses": as,
		})
		fmt.Fprintf(&out, "%s: %s mtu %d %s\n", ifc.Name, state, ifc.MTU, strings.Join(as, " "))
	}
	return &backends.Result{Output: strings.TrimSpace(out.String()), Facts: map[string]any{"interfaces": list}}, nil
}

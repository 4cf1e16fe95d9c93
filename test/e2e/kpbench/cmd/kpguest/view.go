//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/e2e/kpbench"
)

// kernelView reads a proxy's programming back from the kernel.
type kernelView interface {
	// missing counts the workload's endpoints not in the kernel's table.
	missing(w kpbench.Workload) (int, error)
	// has reports whether the Service at vip sends to endpoint ep.
	has(vip, ep netip.Addr) (bool, error)
	// maxSpacing bounds the time between two has reads while a change
	// is awaited, however long the last one took: the resolution of
	// the change's latency.
	maxSpacing() time.Duration
	fmt.Stringer
}

// ipvsView is the IPVS table, for kube-proxy's IPVS mode and switchyard.
type ipvsView struct{ b *bench }

func (ipvsView) String() string { return "IPVS" }

// maxSpacing is short: a netlink dump of one service's real servers costs
// the guest well under a millisecond of CPU; what makes one take tens of
// milliseconds is the host descheduling the whole guest, the proxy
// too, and spacing the next read 4 times that (up to 100 ms) made the
// reads add up to 100 ms to the latency measured (seen: 230 ms
// measured where the proxy's own log put the change in the kernel
// about 30 ms after the write).
func (ipvsView) maxSpacing() time.Duration { return 5 * time.Millisecond }

// missing parses the table only once it has as many real servers as the
// workload has endpoints: fewer prove it incomplete.
func (ipvsView) missing(w kpbench.Workload) (int, error) {
	data, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil {
		return 0, err
	}
	if n, want := kpbench.CountRealServers(data), len(w.Services)*len(w.Services[0].Endpoints); n < want {
		return want - n, nil
	}
	t, err := kpbench.ParseProcIPVS(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	return w.Missing(t), nil
}

func (v ipvsView) has(vip, ep netip.Addr) (bool, error) {
	ds, err := v.b.k.Destinations(vsKey(vip))
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(ds, func(d ipvs.DestinationState) bool { return d.Addr == ep }), nil
}

// nftView is kube-proxy's nftables table: "complete" is every ClusterIP
// in the service-ips map, going to a service chain whose DNAT map holds
// every endpoint (kpbench.NftTable). It remembers each ClusterIP's chain
// from the last whole-table read, so that an endpoint change lists only
// that chain.
type nftView struct {
	chains map[kpbench.VirtualService]string
}

func (*nftView) String() string { return "nftables" }

// maxSpacing is long: an nft run costs tens of milliseconds of the
// guest's one CPU (polled back to back, it took half the CPU from
// kube-proxy's syncs).
func (*nftView) maxSpacing() time.Duration { return 100 * time.Millisecond }

func (v *nftView) missing(w kpbench.Workload) (int, error) {
	t, err := listNft("table", "ip", "kube-proxy")
	if errors.Is(err, errNoTable) {
		return len(w.Services) * len(w.Services[0].Endpoints), nil
	}
	if err != nil {
		return 0, err
	}
	v.chains = t.ServiceIPs
	return w.MissingNft(t), nil
}

func (v *nftView) has(vip, ep netip.Addr) (bool, error) {
	chain, ok := v.chains[kpbench.VirtualService{Protocol: "TCP", Addr: netip.AddrPortFrom(vip, kpbench.ServicePort)}]
	if !ok {
		return false, fmt.Errorf("no service chain known for %s", vip)
	}
	t, err := listNft("chain", "ip", "kube-proxy", chain)
	if err != nil {
		return false, err
	}
	return slices.Contains(t.Chains[chain], netip.AddrPortFrom(ep, kpbench.TargetPort)), nil
}

// errNoTable is nft listing a table or chain that does not exist (yet).
var errNoTable = errors.New("no such table or chain")

// listNft runs `nft list WHAT...` and parses its output.
func listNft(what ...string) (kpbench.NftTable, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("nft", append([]string{"list"}, what...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if strings.Contains(stderr.String(), "No such file or directory") {
			return kpbench.NftTable{}, errNoTable
		}
		return kpbench.NftTable{}, fmt.Errorf("nft list %s: %w: %s", strings.Join(what, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return kpbench.ParseNft(&stdout)
}

const disableIPv6Path = "/proc/sys/net/ipv6/conf/all/disable_ipv6"

// disableIPv6 turns the kernel's IPv6 off and returns what turns it back
// to how it was. A kernel without IPv6 needs nothing.
func disableIPv6() (restore func() error, err error) {
	was, err := os.ReadFile(disableIPv6Path)
	if errors.Is(err, os.ErrNotExist) {
		return func() error { return nil }, nil
	}
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(disableIPv6Path, []byte("1\n"), 0o644); err != nil {
		return nil, fmt.Errorf("disable IPv6: %w", err)
	}
	return func() error {
		if err := os.WriteFile(disableIPv6Path, was, 0o644); err != nil {
			return fmt.Errorf("restore IPv6: %w", err)
		}
		return nil
	}, nil
}

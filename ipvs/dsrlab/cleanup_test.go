//go:build linux

package dsrlab

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/cleanup"
)

// dsrState is what the cleanup test looks at in a node.
type dsrState struct {
	DSRServices, OtherServices int
	Links, Tables              []string
	// GUEPortOpen and GUE6PortOpen: the IPv4 and IPv6 FOU ports.
	GUEPortOpen, GUE6PortOpen bool
}

// readDSRState reads a node's state in the calling thread's namespace:
// the IPVS services (dsr marks apart), the proxy's links, the inet
// tables, and whether the GUE port is taken, per family (a UDP socket
// cannot bind it while the FOU port of its family is open; FOU's IPv6
// socket is IPv6-only, as Go's "udp6" one).
func readDSRState() (dsrState, error) {
	var st dsrState
	k, err := ipvs.NewNetlink()
	if err != nil {
		return st, err
	}
	defer k.Close()
	svcs, err := k.Services()
	if err != nil {
		return st, err
	}
	for _, s := range svcs {
		if m, ok := ipvs.MarkOf(s.VirtualServiceKey); ok && ipvs.IsDSRMark(m) {
			st.DSRServices++
		} else {
			st.OtherServices++
		}
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return st, err
	}
	defer h.Close()
	for _, name := range []string{cleanup.SwitchyardDummy, cleanup.DSRDummy} {
		if _, err := h.LinkByName(name); err == nil {
			st.Links = append(st.Links, name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return st, err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return st, err
	}
	for _, tb := range tables {
		st.Tables = append(st.Tables, tb.Name)
	}
	slices.Sort(st.Tables)
	for _, p := range []struct {
		network string
		open    *bool
	}{{"udp4", &st.GUEPortOpen}, {"udp6", &st.GUE6PortOpen}} {
		pc, err := net.ListenUDP(p.network, &net.UDPAddr{Port: guePort})
		switch {
		case errors.Is(err, unix.EADDRINUSE):
			*p.open = true
		case err != nil:
			return st, err
		default:
			pc.Close()
		}
	}
	return st, nil
}

// TestDSRCleanup: `switchyard --cleanup`'s work (cleanup.Switchyard over
// cleanup.Open) on a node programmed for dsr over GUE removes the dsr
// side with the rest: on n3, an ingress-only node, the peers' firewall-mark
// services, switchyard-dsr, inet switchyard-dsr and the FOU ports (IPv4
// and IPv6: the lab has IPv6 frontends, GUE over IPv6); on n1,
// a backend node, its own virtual services and switchyard0 too (the lab's
// Dataplane runs without a firewall: TestCleanup covers inet switchyard);
// on n2, whose last plan has no frontend, the FOU port through the record
// the table keeps. A second run removes nothing.
func TestDSRCleanup(t *testing.T) {
	requireGuest(t)
	tp := newTopology(t)
	tp.programDSR(t, model.GUE)
	n1, n2, n3 := tp.nodes[0], tp.nodes[1], tp.nodes[2]
	// n2's last plan has no frontend left: its peers' services and
	// addresses go, the table stays with the GUE port's record.
	do(t, n2.ns, func() error {
		return applyDSR(model.DSRPlan{Addr: n2.addr, Encapsulation: model.GUE, GUEPort: guePort, Seed: seed})
	})
	for _, tc := range []struct {
		node   *node
		before dsrState
	}{
		// TCP and UDP over IPv4 and IPv6: a service per peer and family,
		// four of a backend node's own.
		{n1, dsrState{DSRServices: 2, OtherServices: 4, Links: []string{cleanup.SwitchyardDummy, cleanup.DSRDummy},
			Tables: []string{"switchyard-dsr"}, GUEPortOpen: true, GUE6PortOpen: true}},
		{n3, dsrState{DSRServices: 4, Links: []string{cleanup.DSRDummy}, Tables: []string{"switchyard-dsr"}, GUEPortOpen: true, GUE6PortOpen: true}},
		{n2, dsrState{OtherServices: 4, Links: []string{cleanup.SwitchyardDummy, cleanup.DSRDummy}, Tables: []string{"switchyard-dsr"},
			GUEPortOpen: true, GUE6PortOpen: true}},
	} {
		do(t, tc.node.ns, func() error {
			before, err := readDSRState()
			if err != nil {
				return err
			}
			if d := cmp.Diff(tc.before, before); d != "" {
				return fmt.Errorf("%s before the cleanup (-want +got):\n%s", tc.node.name, d)
			}
			h, closeHost, err := cleanup.Open()
			if err != nil {
				return err
			}
			defer closeHost()
			r, err := cleanup.Switchyard(t.Context(), h)
			if err != nil {
				return fmt.Errorf("%s: cleanup: %w", tc.node.name, err)
			}
			t.Logf("dsr-cleanup node=%s removed=%q", tc.node.name, r.Removed)
			after, err := readDSRState()
			if err != nil {
				return err
			}
			if d := cmp.Diff(dsrState{}, after); d != "" {
				t.Errorf("%s after the cleanup (-want +got):\n%s", tc.node.name, d)
			}
			if !slices.Contains(r.Removed, fmt.Sprintf("fou port %d (gue)", guePort)) {
				t.Errorf("%s: the report does not name the FOU port: %q", tc.node.name, r.Removed)
			}
			if r, err := cleanup.Switchyard(t.Context(), h); err != nil || len(r.Removed) != 0 {
				t.Errorf("%s: second cleanup = %q, %v; want nothing removed, no error", tc.node.name, r.Removed, err)
			}
			return nil
		})
	}
}

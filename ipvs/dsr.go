package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// The dsr side (model.DSRPlan, docs/dsr.md) on kernel parts only:
//
//   - on every node, the nftables table DSRTableName marks each packet to
//     a dsr frontend that did not come out of a tunnel with the mark of
//     the node its Maglev slot names (jhash of source address and port,
//     the plan's seed, mod the table size, looked up in the frontend's
//     map), or leaves it unmarked where this node serves the slot;
//   - the frontends' addresses are bound to the dummy link DSRDummy, so
//     that the kernel delivers their packets locally, where IPVS looks
//     the mark up first: each peer has a firewall-mark service with one
//     tunnel real server, the peer's address (DSRServices), and
//     sloppy_tcp lets IPVS take a flow up mid-stream, so that a flow an
//     ECMP router moves to another ingress node goes on to the same peer;
//   - the serving node decapsulates on ipip's fallback device
//     (FallbackTunnel; GUE first through a FOU port) and delivers the
//     packet, unmarked, to the frontend's own virtual service over its
//     local endpoints (the Dataplane's, from the plan's Local frontend):
//     NAT to the endpoint with the client's address kept, and the reply
//     goes straight back from the frontend's address;
//   - ICMP errors to a frontend quoting one of its replies (destination
//     unreachable, "fragmentation needed" among them, and time exceeded)
//     are marked by the quoted reply's destination address and port, the
//     flow's source, hashed as the flow is: they reach the node serving
//     the flow, whose IPVS hands them to the endpoint;
//   - TCP's MSS is clamped on SYN-ACKs leaving from a frontend, so that
//     the client's segments fit once encapsulated.

// Names of what the dsr side owns.
const (
	// DSRDummy holds the dsr frontends' addresses.
	DSRDummy = "switchyard-dsr"
	// DSRTableName is the dsr nftables table (family inet).
	DSRTableName = "switchyard-dsr"
	// FallbackTunnel is ipip's fallback device: it decapsulates the ipip
	// packets (and GUE's, once the FOU port has stripped GUE) to any
	// local address.
	FallbackTunnel = "tunl0"
	// FallbackTunnel6 is ip6_tunnel's fallback device: it decapsulates
	// ip6ip6 packets to any local IPv6 address.
	FallbackTunnel6 = "ip6tnl0"
)

// IsDSRMark reports whether a firewall mark is a dsr peer's
// (plan.DSRMark): non-zero, with none of the low 16 bits set.
func IsDSRMark(m uint32) bool { return m != 0 && m&0xffff == 0 }

// DSRDesired is what the dsr side wants in the kernel for a plan: the
// peers' firewall-mark services, each with its one tunnel real server
// (weight 1), and the frontends' addresses on DSRDummy.
func DSRDesired(p model.DSRPlan) (Desired, error) {
	if !p.Addr.Is4() {
		return Desired{}, fmt.Errorf("ipvs: dsr: node address %v: want IPv4", p.Addr)
	}
	want := Desired{Services: map[model.VirtualServiceKey]DesiredService{}, Addrs: map[netip.Addr]bool{}}
	tunnel := Tunnel{Encapsulation: p.Encapsulation}
	switch p.Encapsulation {
	case model.IPIP:
	case model.GUE:
		tunnel.Port = p.GUEPort
	default:
		return Desired{}, fmt.Errorf("ipvs: dsr: unknown encapsulation %v", p.Encapsulation)
	}
	v6 := slices.ContainsFunc(p.Frontends, func(f model.DSRFrontend) bool { return f.Addr.Is6() })
	if v6 && !p.Addr6.Is6() {
		return Desired{}, fmt.Errorf("ipvs: dsr: IPv6 frontends and no IPv6 node address")
	}
	for _, peer := range p.Peers {
		if !IsDSRMark(peer.Mark) {
			return Desired{}, fmt.Errorf("ipvs: dsr: peer %s: mark %#x is not a dsr mark", peer.Name, peer.Mark)
		}
		k := MarkKey(peer.Mark, peer.Addr.Is6())
		if _, dup := want.Services[k]; dup {
			return Desired{}, fmt.Errorf("ipvs: dsr: peer %s: mark %#x given twice", peer.Name, peer.Mark)
		}
		// One real server: the scheduler has no choice to make.
		s := Service{VirtualServiceKey: k, Scheduler: "rr"}
		d := Destination{DestinationKey: DestinationKey{Addr: peer.Addr}, Weight: 1, Tunnel: tunnel}
		if err := ValidateDestination(k, d); err != nil {
			return Desired{}, fmt.Errorf("ipvs: dsr: peer %s: %w", peer.Name, err)
		}
		want.Services[k] = DesiredService{Service: s, Destinations: []Destination{d}}
		if !v6 {
			continue
		}
		if !peer.Addr6.Is6() {
			// A peer without an IPv6 address serves no IPv6 frontend
			// (plan.DSR leaves it out of their tables): IPv4 only.
			continue
		}
		// The same mark's IPv6 service (IPVS keys firewall-mark services
		// by family too): ip6ip6 to the peer's IPv6 address.
		k6 := MarkKey(peer.Mark, true)
		d6 := Destination{DestinationKey: DestinationKey{Addr: peer.Addr6}, Weight: 1, Tunnel: tunnel}
		if err := ValidateDestination(k6, d6); err != nil {
			return Desired{}, fmt.Errorf("ipvs: dsr: peer %s: %w", peer.Name, err)
		}
		want.Services[k6] = DesiredService{Service: Service{VirtualServiceKey: k6, Scheduler: "rr"}, Destinations: []Destination{d6}}
	}
	for _, f := range p.Frontends {
		want.Addrs[f.Addr] = true
	}
	return want, nil
}

// DSRState narrows what the kernel holds to what the dsr side owns: the
// firewall-mark services of dsr marks (all its own, recorded) and the
// addresses on DSRDummy. Every other service is left out, so that a Diff
// against DSRDesired never touches it, not even a frontend's own virtual
// service on an address DSRDummy holds too.
func DSRState(services map[model.VirtualServiceKey]Entry, addrs []netip.Addr) State {
	st := State{Services: map[model.VirtualServiceKey]Entry{}, Addrs: map[netip.Addr]bool{}, Recorded: map[model.VirtualServiceKey]bool{}}
	for k, e := range services {
		if m, ok := MarkOf(k); ok && IsDSRMark(m) {
			st.Services[k] = e
			st.Recorded[k] = true
		}
	}
	for _, a := range addrs {
		st.Addrs[a] = true
	}
	return st
}

// DSRSysctlSettings are the kernel parameters the dsr side needs:
//   - vs/sloppy_tcp and vs/sloppy_sctp, so that IPVS schedules a TCP or
//     SCTP packet that opens no connection (a mid-flow packet an ECMP
//     change brought to this node) instead of passing it to the local
//     stack, which would reset the flow;
//   - vs/schedule_icmp, so that IPVS forwards an ICMP error about a
//     reply (to the frontend, the reply quoted in it) that reaches a node
//     holding no connection for the flow: the dsr table marks it by the
//     quoted reply's destination, which is the flow's source, so it goes
//     to the flow's node like the flow's own packets;
//   - vs/expire_nodest_conn, so that a connection cached towards a peer
//     whose service is gone (a node that died or left the tables) is
//     dropped at its next packet and the flow rescheduled through the
//     new table at its retransmission, instead of being dropped until
//     it times out (as the Dataplane sets it, for nodes without one);
//   - rp_filter 2 (loose) on FallbackTunnel: a decapsulated packet comes
//     from a client this node routes through another link, which strict
//     mode drops. The kernel uses the larger of conf/all and the
//     device's, so the device's 2 is loose whatever conf/all says, and
//     conf/all stays as it is. Loose mode still drops every packet on a
//     device without an IPv4 address (__fib_validate_source's no_addr),
//     hence DSRTunnels.EnsureFallback's address.
func DSRSysctlSettings() []SysctlSetting {
	return []SysctlSetting{
		{Name: "net/ipv4/vs/sloppy_tcp", Value: "1"},
		{Name: "net/ipv4/vs/sloppy_sctp", Value: "1"},
		{Name: "net/ipv4/vs/schedule_icmp", Value: "1"},
		{Name: "net/ipv4/vs/expire_nodest_conn", Value: "1"},
		{Name: "net/ipv4/conf/" + FallbackTunnel + "/rp_filter", Value: "2"},
	}
}

// splitDSROps splits Diff's ops into those to run before the firewall
// marks packets for them (binds, additions, updates) and those after it
// stops (deletions, unbinds). A destination the dsr side no longer wants
// is deleted at once, not drained: an ingress node holds no connection
// another node could not take up.
func splitDSROps(ops []Op) (before, after []Op) {
	for _, op := range ops {
		switch op.Kind {
		case OpDrainDestination, OpDeleteService, OpUnbindAddr:
			after = append(after, op)
		default:
			before = append(before, op)
		}
	}
	return before, after
}

// DSRFirewall programs the dsr nftables table (DSRTableName) for a plan,
// replacing whatever it held; a plan without frontends removes it,
// unless it is over GUE: the table then stays, holding only the record of
// the FOU port that Apply keeps open, for --cleanup.
type DSRFirewall interface {
	SetDSR(model.DSRPlan) error
}

// DSRTunnels sets up decapsulation: FallbackTunnel up, and a FOU port
// receiving GUE.
type DSRTunnels interface {
	// EnsureFallback binds addr (this node's, as a /32) to FallbackTunnel
	// and sets it up; it fails when the ipip module is not loaded (no
	// fallback device). For an IPv6 addr it sets FallbackTunnel6 up
	// instead (ip6_tunnel's; IPv6 has no reverse-path filter to satisfy).
	EnsureFallback(addr netip.Addr) error
	// EnsureGUE opens a FOU port receiving GUE over IPv4 (over IPv6 with
	// v6: a FOU port is of one family); an open one is kept.
	EnsureGUE(port uint16, v6 bool) error
}

// DSRConfig is what a DSR programs through.
type DSRConfig struct {
	Kernel    Kernel
	Addresses Addresses
	Sysctls   Sysctls
	Firewall  DSRFirewall
	Tunnels   DSRTunnels
}

// DSR programs the dsr side of a node: the peers' tunnel services, the
// frontends' addresses, the table that marks their packets, the
// decapsulation and the sysctls. The frontends' own virtual services
// (their local endpoints) are the Dataplane's. Not wired into the daemon
// yet: the lab tests drive it with plans made by hand.
type DSR struct {
	cfg DSRConfig
}

// NewDSR checks the config.
func NewDSR(cfg DSRConfig) (*DSR, error) {
	if cfg.Kernel == nil || cfg.Addresses == nil || cfg.Sysctls == nil || cfg.Firewall == nil || cfg.Tunnels == nil {
		return nil, errors.New("ipvs: new dsr: Kernel, Addresses, Sysctls, Firewall and Tunnels are required")
	}
	return &DSR{cfg: cfg}, nil
}

// Apply makes the kernel hold p: decapsulation and sysctls first, then
// the addresses and services, then the marks that send packets to them,
// and last the removal of what p no longer has.
func (d *DSR) Apply(p model.DSRPlan) error {
	want, err := DSRDesired(p)
	if err != nil {
		return err
	}
	if err := d.cfg.Tunnels.EnsureFallback(p.Addr); err != nil {
		return fmt.Errorf("ipvs: dsr: %w", err)
	}
	if p.Addr6.IsValid() {
		if err := d.cfg.Tunnels.EnsureFallback(p.Addr6); err != nil {
			return fmt.Errorf("ipvs: dsr: %w", err)
		}
	}
	if p.Encapsulation == model.GUE {
		if err := d.cfg.Tunnels.EnsureGUE(p.GUEPort, false); err != nil {
			return fmt.Errorf("ipvs: dsr: %w", err)
		}
		if p.Addr6.IsValid() {
			// IPv6 frontends' flows arrive in GUE over IPv6.
			if err := d.cfg.Tunnels.EnsureGUE(p.GUEPort, true); err != nil {
				return fmt.Errorf("ipvs: dsr: %w", err)
			}
		}
	}
	if _, _, err := SetSysctls(d.cfg.Sysctls, DSRSysctlSettings()); err != nil {
		return fmt.Errorf("ipvs: dsr: %w", err)
	}
	if _, err := retryDump(func() (struct{}, error) { return struct{}{}, d.cfg.Addresses.EnsureDummy(DSRDummy) }); err != nil {
		return fmt.Errorf("ipvs: dsr: %w", err)
	}
	have, err := d.read()
	if err != nil {
		return err
	}
	before, after := splitDSROps(Diff(want, have, Scope{All: true}))
	if err := d.run(before); err != nil {
		return err
	}
	if err := d.cfg.Firewall.SetDSR(p); err != nil {
		return fmt.Errorf("ipvs: dsr: %w", err)
	}
	return d.run(after)
}

// PeerMarks reads back the peer marks the kernel holds: each dsr
// firewall-mark service's tunnel destination (IPv4 and IPv6 alike) and
// its mark, so that a restarted daemon keeps them
// (reconcile.DSRMarksReader). A mark with more than one destination is
// left out: no plan makes one. It reads the services only: on a node
// that never ran the dsr side (no DSRDummy yet) it finds none.
func (d *DSR) PeerMarks() (map[netip.Addr]uint32, error) {
	entries, err := d.readServices()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]uint32{}
	for k, e := range entries {
		m, _ := MarkOf(k)
		if len(e.Destinations) == 1 {
			out[e.Destinations[0].Addr] = m
		}
	}
	return out, nil
}

// readServices reads the dsr marks' services with their destinations.
func (d *DSR) readServices() (map[model.VirtualServiceKey]Entry, error) {
	// Reads are retried when a concurrent change interrupts them (the
	// namespace's address dump covers every link), as the Dataplane's.
	svcs, err := retryDump(d.cfg.Kernel.Services)
	if err != nil {
		return nil, fmt.Errorf("ipvs: dsr: %w", err)
	}
	entries := map[model.VirtualServiceKey]Entry{}
	for _, s := range svcs {
		if m, ok := MarkOf(s.VirtualServiceKey); !ok || !IsDSRMark(m) {
			continue
		}
		dests, err := retryDump(func() ([]DestinationState, error) { return d.cfg.Kernel.Destinations(s.VirtualServiceKey) })
		if err != nil {
			return nil, fmt.Errorf("ipvs: dsr: %w", err)
		}
		entries[s.VirtualServiceKey] = Entry{Service: s, Destinations: dests}
	}
	return entries, nil
}

func (d *DSR) read() (State, error) {
	entries, err := d.readServices()
	if err != nil {
		return State{}, err
	}
	addrs, err := retryDump(func() ([]netip.Addr, error) { return d.cfg.Addresses.Addrs(DSRDummy) })
	if err != nil {
		return State{}, fmt.Errorf("ipvs: dsr: %w", err)
	}
	return DSRState(entries, addrs), nil
}

func (d *DSR) run(ops []Op) error {
	var errs []error
	for _, op := range ops {
		var err error
		k := op.Service.VirtualServiceKey
		switch op.Kind {
		case OpBindAddr:
			err = d.cfg.Addresses.AddAddr(DSRDummy, op.Addr)
		case OpUnbindAddr:
			err = d.cfg.Addresses.DelAddr(DSRDummy, op.Addr)
		case OpAddService:
			err = d.cfg.Kernel.AddService(op.Service)
		case OpUpdateService:
			err = d.cfg.Kernel.UpdateService(op.Service)
		case OpDeleteService:
			err = d.cfg.Kernel.DeleteService(k)
		case OpAddDestination:
			err = d.cfg.Kernel.AddDestination(k, op.Dest)
		case OpUpdateDestination:
			err = d.cfg.Kernel.UpdateDestination(k, op.Dest)
		case OpDrainDestination:
			err = d.cfg.Kernel.DeleteDestination(k, op.Dest.DestinationKey)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ipvs: dsr: %w", errors.Join(errs...))
	}
	return nil
}

// dsrFrontendSlots returns a frontend's map elements: slot -> mark for
// the slots another node serves (a missing slot leaves the packet
// unmarked: this node serves it).
func dsrFrontendSlots(f model.DSRFrontend) (slots []uint32, marks []uint32) {
	for i, m := range f.Slots {
		if m != 0 {
			slots = append(slots, uint32(i))
			marks = append(marks, m)
		}
	}
	return slots, marks
}

package ipvs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/genetlink"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
)

// NFTDSR is DSRFirewall over google/nftables, in the network namespace
// of the thread that calls SetDSR.
type NFTDSR struct {
	mu sync.Mutex
}

var _ DSRFirewall = (*NFTDSR)(nil)

// regHashIn is the register (NFT_REG32_00) where the flow hash's input
// starts: the source address (4 or 16 bytes), then the source port in
// the register after it.
const regHashIn = 8

// SetDSR replaces the table in one transaction: prerouting marks each
// frontend's packets by their Maglev slot, except those out of
// FallbackTunnel; postrouting clamps the MSS of the frontends' SYN-ACKs.
func (n *NFTDSR) SetDSR(p model.DSRPlan) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	elems := 0
	for _, f := range p.Frontends {
		elems += len(f.Slots)
	}
	c, err := newConn(elems)
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	table := &nftables.Table{Family: nftables.TableFamilyINet, Name: DSRTableName}
	// Add (a no-op when it exists), delete, add: an empty table whatever
	// was there, in the same transaction as its new content.
	c.AddTable(table)
	c.DelTable(table)
	if len(p.Frontends) == 0 && p.Encapsulation != model.GUE {
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nftables: remove table %s: %w", DSRTableName, err)
		}
		return nil
	}
	c.AddTable(table)
	if p.Encapsulation == model.GUE {
		// The record --cleanup reads to close the FOU port (ReadDSRRecord).
		set := &nftables.Set{Table: table, Name: dsrGUEPortSet, KeyType: nftables.TypeInetService}
		if err := c.AddSet(set, []nftables.SetElement{{Key: binaryutil.BigEndian.PutUint16(p.GUEPort)}}); err != nil {
			return fmt.Errorf("nftables: set %s: %w", set.Name, err)
		}
	}
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	post := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	for i, f := range p.Frontends {
		mss := p.MSS
		if f.Addr.Is6() {
			mss = p.MSS6
		}
		if mss > 0 && f.Protocol == model.TCP {
			c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: clampMSS(f.VirtualServiceKey, mss)})
		}
		slots, marks := dsrFrontendSlots(f)
		if len(slots) == 0 {
			continue // every slot served here: nothing to mark
		}
		set := &nftables.Set{
			Table: table, Name: fmt.Sprintf("slots%d", i), IsMap: true,
			KeyType: nftables.TypeInteger, DataType: nftables.TypeMark,
		}
		els := make([]nftables.SetElement, len(slots))
		for j := range slots {
			els[j] = nftables.SetElement{Key: binaryutil.NativeEndian.PutUint32(slots[j]), Val: binaryutil.NativeEndian.PutUint32(marks[j])}
		}
		if err := addSet(c, set, els); err != nil { // in chunks: a 16381-slot map overflows one message
			return fmt.Errorf("nftables: set %s: %w", set.Name, err)
		}
		// jhash ip saddr . th sport mod size seed seed
		srcOff, addrLen := uint32(12), uint32(4)
		if f.Addr.Is6() {
			srcOff, addrLen = 8, 16
		}
		exprs := slices.Concat(notFromTunnels(), frontendMatch(f.VirtualServiceKey, false), slotMark(
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: srcOff, Len: addrLen},
			&expr.Payload{DestRegister: regHashIn + addrLen/4, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			addrLen, len(f.Slots), p.Seed, set))
		c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: exprs})
		types := []byte{icmpDestUnreach, icmpTimeExceeded}
		if f.Addr.Is6() {
			types = []byte{icmp6DestUnreach, icmp6PacketTooBig, icmp6TimeExceeded}
		}
		for _, typ := range types {
			c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: icmpErrorSlot(f.VirtualServiceKey, typ, len(f.Slots), p.Seed, set)})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write table %s: %w", DSRTableName, err)
	}
	return nil
}

// ICMP error types the dsr table forwards.
const (
	icmpDestUnreach   = 3
	icmpTimeExceeded  = 11
	icmp6DestUnreach  = 1
	icmp6PacketTooBig = 2
	icmp6TimeExceeded = 3
)

// notFromTunnels matches a packet that did not come out of a fallback
// tunnel: a decapsulated packet is served here, never forwarded again.
func notFromTunnels() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(FallbackTunnel)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(FallbackTunnel6)},
	}
}

// slotMark hashes what addr (an address of addrLen bytes, into
// regHashIn) and port (2 bytes, into the register after it) load, looks
// the slot up in set and sets the packet's mark to it: jhash mod size
// seed seed, as every node does.
func slotMark(addr, port *expr.Payload, addrLen uint32, size int, seed uint32, set *nftables.Set) []expr.Any {
	return []expr.Any{
		addr, port,
		&expr.Hash{SourceRegister: regHashIn, DestRegister: 1, Length: addrLen + 4, Modulus: uint32(size), Seed: seed, Type: expr.HashTypeJenkins},
		&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: set.Name, SetID: set.ID},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// icmpErrorSlot marks an ICMP (ICMPv6) error of type typ to the
// frontend, not out of a tunnel, that quotes a reply of the frontend (an
// IPv4 header without options, or an IPv6 header without extension
// headers, then the transport header: source the frontend's address and
// port, protocol the frontend's) with the slot of the quoted reply's
// destination address and port, which are the flow's source: the hash's
// input is the same as the flow's packets', so the error goes where the
// flow goes. The quote starts 8 bytes into the ICMP header.
func icmpErrorSlot(k model.VirtualServiceKey, typ byte, size int, seed uint32, set *nftables.Set) []expr.Any {
	const quote = 8
	a := k.Addr.AsSlice()
	nfproto, l4, dstOff := byte(unix.NFPROTO_IPV4), byte(unix.IPPROTO_ICMP), uint32(16)
	// The quoted header: its first byte (version, and IHL 5 for IPv4),
	// where its protocol, source and destination are, its length.
	first, firstMask, protoOff, srcOff, qDstOff, qLen := byte(0x45), byte(0xff), uint32(9), uint32(12), uint32(16), uint32(20)
	if k.Addr.Is6() {
		nfproto, l4, dstOff = unix.NFPROTO_IPV6, unix.IPPROTO_ICMPV6, 24
		first, firstMask, protoOff, srcOff, qDstOff, qLen = 0x60, 0xf0, 6, 8, 24, 40
	}
	addrLen := uint32(len(a))
	exprs := slices.Concat(notFromTunnels(), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: dstOff, Len: addrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: quote, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{firstMask}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{first}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: quote + protoOff, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ipProto(k.Protocol)}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: quote + srcOff, Len: addrLen},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: quote + qLen, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(k.Port)},
	})
	return append(exprs, slotMark(
		&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseTransportHeader, Offset: quote + qDstOff, Len: addrLen},
		&expr.Payload{DestRegister: regHashIn + addrLen/4, Base: expr.PayloadBaseTransportHeader, Offset: quote + qLen + 2, Len: 2},
		addrLen, size, seed, set)...)
}

// frontendMatch matches an IPv4 or IPv6 packet to (reply: from) the
// frontend's address, protocol and port.
func frontendMatch(k model.VirtualServiceKey, reply bool) []expr.Any {
	nfproto, addrOff, portOff := byte(unix.NFPROTO_IPV4), uint32(16), uint32(2)
	if k.Addr.Is6() {
		nfproto, addrOff = unix.NFPROTO_IPV6, 24
	}
	if reply {
		addrOff -= uint32(len(k.Addr.AsSlice()))
		portOff = 0
	}
	a := k.Addr.AsSlice()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfproto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: uint32(len(a))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ipProto(k.Protocol)}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: portOff, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(k.Port)},
	}
}

// clampMSS lowers the MSS option of a SYN-ACK from the frontend to mss
// when it is larger (tcp option maxseg size set).
func clampMSS(k model.VirtualServiceKey, mss uint16) []expr.Any {
	const synAck = 0x12
	return append(frontendMatch(k, true),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{synAck}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{synAck}},
		&expr.Exthdr{Op: expr.ExthdrOpTcpopt, Type: 2, Offset: 2, Len: 2, DestRegister: 1},
		&expr.Cmp{Op: expr.CmpOpGt, Register: 1, Data: binaryutil.BigEndian.PutUint16(mss)},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(mss)},
		&expr.Exthdr{Op: expr.ExthdrOpTcpopt, Type: 2, Offset: 2, Len: 2, SourceRegister: 1},
	)
}

// NetlinkDSRTunnels is DSRTunnels over vishvananda/netlink, in the
// network namespace it was opened in.
type NetlinkDSRTunnels struct {
	mu sync.Mutex
	h  *netlink.Handle
}

var _ DSRTunnels = (*NetlinkDSRTunnels)(nil)

// NewNetlinkDSRTunnels opens a route-netlink handle in the calling
// thread's network namespace.
func NewNetlinkDSRTunnels() (*NetlinkDSRTunnels, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("ipvs: open netlink: %w", err)
	}
	return &NetlinkDSRTunnels{h: h}, nil
}

// Close releases the handles.
func (n *NetlinkDSRTunnels) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.h.Close()
	return nil
}

func (n *NetlinkDSRTunnels) EnsureFallback(addr netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr.Is6() {
		link, err := n.h.LinkByName(FallbackTunnel6)
		if err != nil {
			return fmt.Errorf("find %s (is the ip6_tunnel module loaded?): %w", FallbackTunnel6, dumpErr(err))
		}
		if link.Attrs().Flags&unix.IFF_UP != 0 {
			return nil
		}
		if err := n.h.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", FallbackTunnel6, err)
		}
		return nil
	}
	link, err := n.h.LinkByName(FallbackTunnel)
	if err != nil {
		return fmt.Errorf("find %s (is the ipip module loaded?): %w", FallbackTunnel, dumpErr(err))
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := n.h.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("bind %s to %s: %w", addr, FallbackTunnel, err)
	}
	if link.Attrs().Flags&unix.IFF_UP != 0 {
		return nil
	}
	if err := n.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", FallbackTunnel, err)
	}
	return nil
}

// fouVersion is FOU_GENL_VERSION.
const fouVersion = 1

// EnsureGUE opens the port (IPv4, or IPv6 with v6) with FOU's generic
// netlink family, in the calling thread's namespace, unless FOU has it
// open already (a second
// FOU_CMD_ADD fails with EADDRINUSE, seen in the lab). It leaves out
// FOU_ATTR_IPPROTO, which GUE does not take: vishvananda/netlink's FouAdd
// sends it (as 0) and the 6.1 kernel refuses that with ERANGE, where
// iproute2 succeeds (seen in the lab).
func (n *NetlinkDSRTunnels) EnsureGUE(port uint16, v6 bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := genetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("open generic netlink: %w", err)
	}
	defer c.Close()
	fam, err := c.GetFamily("fou")
	if err != nil {
		return fmt.Errorf("GUE port %d: find the fou family (is the fou module loaded?): %w", port, err)
	}
	get, err := fouMessage(netlink.FOU_CMD_GET, port, v6, false)
	if err != nil {
		return err
	}
	if _, err := c.Execute(get, fam.ID, mdnetlink.Request); err == nil {
		return nil // open (fou_nl_cmd_get_port answers ESRCH otherwise)
	}
	add, err := fouMessage(netlink.FOU_CMD_ADD, port, v6, true)
	if err != nil {
		return err
	}
	if _, err := c.Execute(add, fam.ID, mdnetlink.Request|mdnetlink.Acknowledge); err != nil {
		return fmt.Errorf("open GUE port %d: %w", port, err)
	}
	return nil
}

// fouMessage is a FOU command about an IPv4 port (IPv6 with v6; of type
// GUE, with gue).
func fouMessage(cmd uint8, port uint16, v6, gue bool) (genetlink.Message, error) {
	ae := mdnetlink.NewAttributeEncoder()
	ae.Bytes(netlink.FOU_ATTR_PORT, binaryutil.BigEndian.PutUint16(port))
	family := uint8(unix.AF_INET)
	if v6 {
		family = unix.AF_INET6
	}
	ae.Uint8(netlink.FOU_ATTR_AF, family)
	if gue {
		ae.Uint8(netlink.FOU_ATTR_TYPE, netlink.FOU_ENCAP_GUE)
	}
	data, err := ae.Encode()
	if err != nil {
		return genetlink.Message{}, fmt.Errorf("GUE port %d: %w", port, err)
	}
	return genetlink.Message{Header: genetlink.Header{Command: cmd, Version: fouVersion}, Data: data}, nil
}

// dsrGUEPortSet is the set of the dsr table that records the GUE port.
const dsrGUEPortSet = "gue_port"

// ReadDSRRecord reports whether the dsr table (DSRTableName) exists in
// the calling thread's namespace and the GUE port it records (0 for
// none).
func ReadDSRRecord() (exists bool, guePort uint16, err error) {
	c, err := nftables.New()
	if err != nil {
		return false, 0, fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, 0, fmt.Errorf("nftables: list tables: %w", err)
	}
	var table *nftables.Table
	for _, t := range tables {
		if t.Name == DSRTableName {
			table = t
		}
	}
	if table == nil {
		return false, 0, nil
	}
	sets, err := c.GetSets(table)
	if err != nil {
		return true, 0, fmt.Errorf("nftables: sets of %s: %w", DSRTableName, err)
	}
	for _, set := range sets {
		if set.Name != dsrGUEPortSet {
			continue
		}
		els, err := c.GetSetElements(set)
		if err != nil {
			return true, 0, fmt.Errorf("nftables: %s: %w", dsrGUEPortSet, err)
		}
		for _, e := range els {
			if len(e.Key) >= 2 {
				return true, binaryutil.BigEndian.Uint16(e.Key[:2]), nil
			}
		}
	}
	return true, 0, nil
}

// CloseGUEPort closes the FOU ports of port, IPv4 and IPv6, in the
// calling thread's namespace and reports whether one was open.
func CloseGUEPort(port uint16) (bool, error) {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return false, fmt.Errorf("open generic netlink: %w", err)
	}
	defer c.Close()
	fam, err := c.GetFamily("fou")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // no fou module: no port
	}
	if err != nil {
		return false, fmt.Errorf("GUE port %d: find the fou family: %w", port, err)
	}
	closed := false
	for _, v6 := range []bool{false, true} {
		msg, err := fouMessage(netlink.FOU_CMD_DEL, port, v6, false)
		if err != nil {
			return closed, err
		}
		_, err = c.Execute(msg, fam.ID, mdnetlink.Request|mdnetlink.Acknowledge)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
			continue // fou_destroy's answer for a port not open
		}
		if err != nil {
			return closed, fmt.Errorf("close GUE port %d: %w", port, err)
		}
		closed = true
	}
	return closed, nil
}

// ifname is an interface name as nftables compares it: NUL-padded to
// IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

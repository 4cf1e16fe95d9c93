package ipvs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
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

// The registers the rules use: NFT_REG32_00 and the one after it hold
// the flow hash's input (source address, then source port).
const (
	regHashIn  = 8
	regHashIn2 = 9
)

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
	if len(p.Frontends) == 0 {
		if err := c.Flush(); err != nil {
			return fmt.Errorf("nftables: remove table %s: %w", DSRTableName, err)
		}
		return nil
	}
	c.AddTable(table)
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{
		Name: "prerouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	post := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	tunnel := ifname(FallbackTunnel)
	for i, f := range p.Frontends {
		frontend := frontendMatch(f.VirtualServiceKey, false)
		if p.MSS > 0 && f.Protocol == model.TCP {
			c.AddRule(&nftables.Rule{Table: table, Chain: post, Exprs: clampMSS(f.VirtualServiceKey, p.MSS)})
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
		exprs := append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: tunnel},
		}, frontend...)
		exprs = append(exprs,
			// jhash ip saddr . th sport mod size seed seed
			&expr.Payload{DestRegister: regHashIn, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Payload{DestRegister: regHashIn2, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
			&expr.Hash{SourceRegister: regHashIn, DestRegister: 1, Length: 8, Modulus: uint32(len(f.Slots)), Seed: p.Seed, Type: expr.HashTypeJenkins},
			&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: set.Name, SetID: set.ID},
			&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
		)
		c.AddRule(&nftables.Rule{Table: table, Chain: pre, Exprs: exprs})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: write table %s: %w", DSRTableName, err)
	}
	return nil
}

// frontendMatch matches an IPv4 packet to (reply: from) the frontend's
// address, protocol and port.
func frontendMatch(k model.VirtualServiceKey, reply bool) []expr.Any {
	addrOff, portOff := uint32(16), uint32(2)
	if reply {
		addrOff, portOff = 12, 0
	}
	a := k.Addr.As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: addrOff, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a[:]},
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

// EnsureGUE opens the port with FOU's generic netlink family, in the
// calling thread's namespace. It leaves out FOU_ATTR_IPPROTO, which GUE
// does not take: vishvananda/netlink's FouAdd sends it (as 0) and the
// 6.1 kernel refuses that with ERANGE, where iproute2 succeeds (seen in
// the lab).
func (n *NetlinkDSRTunnels) EnsureGUE(port uint16) error {
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
	ae := mdnetlink.NewAttributeEncoder()
	ae.Bytes(netlink.FOU_ATTR_PORT, binaryutil.BigEndian.PutUint16(port))
	ae.Uint8(netlink.FOU_ATTR_AF, unix.AF_INET)
	ae.Uint8(netlink.FOU_ATTR_TYPE, netlink.FOU_ENCAP_GUE)
	data, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("GUE port %d: %w", port, err)
	}
	msg := genetlink.Message{Header: genetlink.Header{Command: netlink.FOU_CMD_ADD, Version: fouVersion}, Data: data}
	_, err = c.Execute(msg, fam.ID, mdnetlink.Request|mdnetlink.Acknowledge)
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("open GUE port %d: %w", port, err)
	}
	return nil
}

// ifname is an interface name as nftables compares it: NUL-padded to
// IFNAMSIZ.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

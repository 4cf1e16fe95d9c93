package ipvs

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/switchyard-lb/switchyard/core/model"
)

// TableName is the dataplane's nftables table (family inet). Nothing else
// in nftables is touched.
const TableName = "switchyard"

// MasqueradeMark is the packet mark bit that asks for masquerade, set
// before IPVS sees the packet and matched after it forwarded it.
const MasqueradeMark = 0x4000

// NFTables is Firewall over nftables (google/nftables, no nft binary), in
// the network namespace of the thread that created it. The table:
//
//	table inet switchyard {
//	  set cluster-ips4 { type ipv4_addr }  set cluster-ips6 { type ipv6_addr }
//	  set external-ips4 { type ipv4_addr } set external-ips6 { type ipv6_addr }
//	  chain mark-prerouting { type filter hook prerouting priority dstnat; jump mark }
//	  chain mark-output     { type filter hook output priority dstnat; jump mark }
//	  set nodeports4 { type ipv4_addr . inet_proto . inet_service } (and 6)
//	  chain mark {
//	    ip daddr @external-ips4 meta mark set mark | 0x4000
//	    ip daddr @cluster-ips4 jump mark-unless-cluster
//	    ip daddr . meta l4proto . th dport @nodeports4 meta mark set mark | 0x4000
//	  }                                                   (and the same for ip6)
//	  chain source-ranges { type filter hook prerouting priority -110
//	    ip daddr VIP meta l4proto P th dport PORT jump source-range-N ... }
//	  chain source-range-N { ip saddr <range> return ...; drop }
//	  chain mark-unless-cluster { ip saddr <cidr> return ...; meta mark set mark | 0x4000 }
//	  chain masquerade { type nat hook postrouting priority srcnat; meta mark & 0x4000 != 0 masquerade }
//	}
//
// With MasqueradeAll, mark-unless-cluster has no returns.
type NFTables struct {
	mu sync.Mutex
}

var _ Firewall = (*NFTables)(nil)

// NewNFTables returns a Firewall; it opens a netlink connection per Sync.
func NewNFTables() *NFTables { return &NFTables{} }

// Close releases nothing and keeps the table: rules outlive the process.
func (n *NFTables) Close() error { return nil }

func (n *NFTables) Sync(spec FirewallSpec) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("ipvs: nftables: %w", err)
	}
	defer c.CloseLasting()
	// add + delete + add in one batch: atomic, and works whether or not
	// the table exists.
	table := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)

	sets := map[string]*nftables.Set{}
	for _, s := range []struct {
		name  string
		typ   nftables.SetDatatype
		addrs []netip.Addr
		v4    bool
	}{
		{"cluster-ips4", nftables.TypeIPAddr, spec.ClusterIPs, true},
		{"cluster-ips6", nftables.TypeIP6Addr, spec.ClusterIPs, false},
		{"external-ips4", nftables.TypeIPAddr, spec.ExternalIPs, true},
		{"external-ips6", nftables.TypeIP6Addr, spec.ExternalIPs, false},
	} {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.typ}
		var elems []nftables.SetElement
		for _, a := range s.addrs {
			if a.Is4() == s.v4 {
				elems = append(elems, nftables.SetElement{Key: a.AsSlice()})
			}
		}
		if err := c.AddSet(set, elems); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}

	for _, s := range []struct {
		name string
		typ  nftables.SetDatatype
		v4   bool
	}{
		{"nodeports4", nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService), true},
		{"nodeports6", nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService), false},
	} {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.typ, Concatenation: true}
		var elems []nftables.SetElement
		for _, k := range spec.NodePorts {
			if k.Addr.Is4() == s.v4 {
				elems = append(elems, nftables.SetElement{Key: concatKey(k)})
			}
		}
		if err := c.AddSet(set, elems); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}

	markChain := c.AddChain(&nftables.Chain{Name: "mark", Table: table})
	unless := c.AddChain(&nftables.Chain{Name: "mark-unless-cluster", Table: table})
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"mark-prerouting", nftables.ChainHookPrerouting}, {"mark-output", nftables.ChainHookOutput}} {
		ch := c.AddChain(&nftables.Chain{Name: h.name, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: nftables.ChainPriorityNATDest})
		c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{
			&expr.Verdict{Kind: expr.VerdictJump, Chain: markChain.Name},
		}})
	}
	for _, fam := range []ipFamily{ipv4, ipv6} {
		match := func(set string) []expr.Any {
			return []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.dst, Len: fam.size},
				&expr.Lookup{SourceRegister: 1, SetName: sets[set].Name, SetID: sets[set].ID},
			}
		}
		c.AddRule(&nftables.Rule{Table: table, Chain: markChain,
			Exprs: append(match("external-ips"+fam.suffix), setMark()...)})
		c.AddRule(&nftables.Rule{Table: table, Chain: markChain,
			Exprs: append(match("cluster-ips"+fam.suffix), &expr.Verdict{Kind: expr.VerdictJump, Chain: unless.Name})})
		// daddr . l4proto . dport into consecutive 32-bit registers.
		np := sets["nodeports"+fam.suffix]
		protoReg := 8 + fam.size/4
		c.AddRule(&nftables.Rule{Table: table, Chain: markChain, Exprs: append([]expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: fam.dst, Len: fam.size},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
			&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 8, SetName: np.Name, SetID: np.ID},
		}, setMark()...)})
		if spec.MasqueradeAll {
			continue
		}
		for _, p := range spec.ClusterCIDRs {
			if p.Addr().Is4() != (fam.proto == unix.NFPROTO_IPV4) {
				continue
			}
			p = p.Masked()
			mask := net.CIDRMask(p.Bits(), p.Addr().BitLen())
			c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.src, Len: fam.size},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: fam.size, Mask: mask, Xor: make([]byte, fam.size)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
				&expr.Verdict{Kind: expr.VerdictReturn},
			}})
		}
	}
	if !spec.MasqueradeAll && len(spec.ClusterCIDRs) == 0 {
		// Without cluster CIDRs nothing tells pods from others: like
		// kube-proxy, masquerade no ClusterIP traffic.
		c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: setMark()})

	if len(spec.SourceRanges) > 0 {
		ranges := c.AddChain(&nftables.Chain{Name: "source-ranges", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(-110)})
		for i, sr := range spec.SourceRanges {
			check := c.AddChain(&nftables.Chain{Name: fmt.Sprintf("source-range-%d", i), Table: table})
			fam := familyOf(sr.Key.Addr)
			c.AddRule(&nftables.Rule{Table: table, Chain: ranges, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.dst, Len: fam.size},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: sr.Key.Addr.AsSlice()},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{ipProto(sr.Key.Protocol)}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(sr.Key.Port)},
				&expr.Verdict{Kind: expr.VerdictJump, Chain: check.Name},
			}})
			for _, p := range sr.Ranges {
				if p.Addr().Is4() != sr.Key.Addr.Is4() {
					continue
				}
				p = p.Masked()
				c.AddRule(&nftables.Rule{Table: table, Chain: check, Exprs: []expr.Any{
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.src, Len: fam.size},
					&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: fam.size,
						Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()), Xor: make([]byte, fam.size)},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
					&expr.Verdict{Kind: expr.VerdictReturn},
				}})
			}
			c.AddRule(&nftables.Rule{Table: table, Chain: check, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		}
	}

	masq := c.AddChain(&nftables.Chain{Name: "masquerade", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: table, Chain: masq, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(MasqueradeMark), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Masq{},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("ipvs: nftables: program table %s: %w", TableName, err)
	}
	return nil
}

// setMark is "meta mark set meta mark | MasqueradeMark".
func setMark() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(^uint32(MasqueradeMark)),
			Xor:  binaryutil.NativeEndian.PutUint32(MasqueradeMark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// ipFamily is where an IP header keeps its addresses.
type ipFamily struct {
	proto          byte
	dst, src, size uint32
	suffix         string
}

var (
	ipv4 = ipFamily{unix.NFPROTO_IPV4, 16, 12, 4, "4"}
	ipv6 = ipFamily{unix.NFPROTO_IPV6, 24, 8, 16, "6"}
)

func familyOf(a netip.Addr) ipFamily {
	if a.Is4() {
		return ipv4
	}
	return ipv6
}

func ipProto(p model.Protocol) byte {
	switch p {
	case model.TCP:
		return unix.IPPROTO_TCP
	case model.UDP:
		return unix.IPPROTO_UDP
	case model.SCTP:
		return unix.IPPROTO_SCTP
	}
	return 0
}

// concatKey is the key of address . inet_proto . inet_service, each field
// padded to 4 bytes as nftables concatenations are.
func concatKey(k model.VirtualServiceKey) []byte {
	b := append([]byte{}, k.Addr.AsSlice()...)
	b = append(b, ipProto(k.Protocol), 0, 0, 0)
	return append(b, byte(k.Port>>8), byte(k.Port), 0, 0)
}

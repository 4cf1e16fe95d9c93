package ipvs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
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
//	  chain mark-unless-cluster { <local match> return ...; meta mark set mark | 0x4000 }
//	    (a local match: ip saddr <cidr>, iifname <bridge> or iifname <prefix>*, from
//	     spec.Local; for a family without one: { meta nfproto ipv4 ip saddr @cluster-ips4
//	     meta mark set mark | 0x4000; meta nfproto ipv4 return })
//	  set hairpin4 { type ipv4_addr . ipv4_addr }    (endpoint . endpoint; and 6)
//	  map internal4 { type ipv4_addr . inet_proto . inet_service : mark } (and 6)
//	    (mark-output, after jump mark: meta mark set ip daddr . meta l4proto . th dport map @internal4;
//	     mark-prerouting, after jump mark, once per local match:
//	       <local match> meta mark set ip daddr . meta l4proto . th dport map @internal4)
//	  set owned4 { type ipv4_addr . inet_proto . inet_service } (and 6; only read back)
//	  set stamp { type inet_service; elements = { 0 comment "switchyard-spec <Stamp>" } }
//	  chain masquerade { type nat hook postrouting priority srcnat
//	    ip daddr . ip saddr @hairpin4 masquerade        (and ip6: hairpin)
//	    meta mark & 0x4000 != 0 masquerade
//	    meta mark & 0x3fff != 0 fib saddr type local masquerade }   (internal marks: the node's own)
//	}
//
// With MasqueradeAll, mark-unless-cluster has no returns and every
// internally marked packet is masqueraded. The stamp lets
// Load tell whether the table already holds a spec, so that an unchanged
// spec is never rewritten; Update changes elements of the sets and the
// stamp alone, and RecordOwned updates the owned sets alone (the stamp
// does not cover them).
type NFTables struct {
	mu    sync.Mutex
	stamp string // the stamp the table holds, as last written or read; "" unknown
	// conn is the lasting netlink connection that every transaction and
	// read uses, opened by the first and closed after any error (it may
	// hold queued messages or unread replies then) and by Close; sock is
	// its socket, whose buffers grow to the largest transaction so far
	// (buf bytes).
	conn *nftables.Conn
	sock *netlink.Conn
	buf  int
	// gen is the ruleset's generation (each committed nftables
	// transaction, anyone's, adds one) after the last transaction or
	// Load, which left the table as this NFTables knows it when
	// genKnown: no other transaction came between (see Untouched).
	gen      uint32
	genKnown bool
}

var _ UntouchedFirewall = (*NFTables)(nil)

var _ Firewall = (*NFTables)(nil)

// NewNFTables returns a Firewall; its netlink connection opens at the
// first use, in the calling thread's network namespace, and lasts until
// Close or an error.
func NewNFTables() *NFTables { return &NFTables{} }

// Close closes the netlink connection and keeps the table: rules outlive
// the process. A later use opens a new connection.
func (n *NFTables) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.drop()
}

// open returns the lasting connection, its buffers large enough for a
// transaction of about elems set elements.
func (n *NFTables) open(elems int) (*nftables.Conn, error) {
	size := bufferSize(elems)
	if n.conn != nil {
		if size > n.buf {
			if err := setBuffers(n.sock, size); err != nil {
				return nil, fmt.Errorf("ipvs: nftables: %w", errors.Join(err, n.drop()))
			}
			n.buf = size
		}
		return n.conn, nil
	}
	var sock *netlink.Conn
	c, err := nftables.New(nftables.AsLasting(), nftables.WithSockOptions(func(nc *netlink.Conn) error {
		sock = nc
		return setBuffers(nc, size)
	}))
	if err != nil {
		return nil, fmt.Errorf("ipvs: nftables: %w", err)
	}
	n.conn, n.sock, n.buf = c, sock, size
	return c, nil
}

// connect opens the lasting connection now, in the calling thread's
// network namespace.
func (n *NFTables) connect() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, err := n.open(0)
	return err
}

// drop closes the lasting connection, if any.
func (n *NFTables) drop() error {
	c := n.conn
	n.conn, n.sock, n.buf = nil, nil, 0
	n.genKnown = false
	if c == nil {
		return nil
	}
	if err := c.CloseLasting(); err != nil {
		return fmt.Errorf("ipvs: nftables: close: %w", err)
	}
	return nil
}

// check closes the connection when err is set, and returns err.
func (n *NFTables) check(err error) error {
	if err != nil {
		_ = n.drop() // err says what went wrong
	}
	return err
}

// Sync replaces the table with spec's.
func (n *NFTables) Sync(spec FirewallSpec) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stamp = ""
	stamp := spec.Stamp() // hashes every element: once
	before, err := n.generation()
	if err == nil {
		err = n.rewrite(spec, stamp)
	}
	if err := n.check(err); err != nil {
		return err
	}
	n.written(before, true)
	n.stamp = stamp
	return nil
}

// Untouched reports whether no nftables transaction, this NFTables' or
// anyone's, was committed since the last one of its own or its last
// Load, either of which left the table as it knows it. It reads the
// ruleset's generation: one small request, where a Load reads every
// element.
func (n *NFTables) Untouched() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.genKnown || n.conn == nil {
		return false
	}
	g, err := n.generation()
	if n.check(err) != nil {
		return false
	}
	return g == n.gen
}

// written records the generation after a transaction that succeeded,
// the ruleset's generation being before when it began. The table is as
// known after it when the transaction was the only one since, and the
// table was as known before it or it rewrote the table whole.
func (n *NFTables) written(before uint32, whole bool) {
	after, err := n.generation()
	if n.check(err) != nil {
		return
	}
	n.genKnown = after == before+1 && (whole || (n.genKnown && n.gen == before))
	n.gen = after
}

// genType is the type of the kernel's answer to NFT_MSG_GETGEN.
const genType = netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWGEN)

// generation reads the ruleset's generation (NFT_MSG_GETGEN), which
// every committed transaction in this network namespace changes.
func (n *NFTables) generation() (uint32, error) {
	if _, err := n.open(0); err != nil {
		return 0, err
	}
	msgs, err := n.sock.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	})
	if err != nil {
		return 0, fmt.Errorf("ipvs: nftables: read the generation: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type != genType || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("ipvs: nftables: read the generation: %w", err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, errors.New("ipvs: nftables: read the generation: no NFTA_GEN_ID in the answer")
}

// rewrite replaces the table with spec's in one transaction.
func (n *NFTables) rewrite(spec FirewallSpec, stamp string) error {
	elems := len(spec.ClusterIPs) + len(spec.ExternalIPs) + len(spec.NodePorts) + 2*len(spec.Endpoints) + len(spec.Owned) + len(spec.Internal)
	c, err := n.open(elems)
	if err != nil {
		return err
	}
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
		if err := addSet(c, set, elems); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}

	for _, s := range []struct {
		name string
		typ  nftables.SetDatatype
		keys []model.VirtualServiceKey
		v4   bool
	}{
		{"nodeports4", nodePortType4, spec.NodePorts, true},
		{"nodeports6", nodePortType6, spec.NodePorts, false},
	} {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.typ, Concatenation: true}
		var elems []nftables.SetElement
		for _, k := range s.keys {
			if k.Addr.Is4() == s.v4 {
				elems = append(elems, nftables.SetElement{Key: concatKey(k)})
			}
		}
		if err := addSet(c, set, elems); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}

	for _, s := range []struct {
		name string
		typ  nftables.SetDatatype
		v4   bool
	}{{"internal4", nodePortType4, true}, {"internal6", nodePortType6, false}} {
		set := &nftables.Set{Table: table, Name: s.name, KeyType: s.typ, DataType: nftables.TypeMark,
			IsMap: true, Concatenation: true}
		var elems []nftables.SetElement
		for _, im := range spec.Internal {
			if im.Key.Addr.Is4() == s.v4 {
				elems = append(elems, nftables.SetElement{Key: concatKey(im.Key), Val: binaryutil.NativeEndian.PutUint32(im.Mark)})
			}
		}
		if err := addSet(c, set, elems); err != nil {
			return fmt.Errorf("ipvs: nftables map %s: %w", s.name, err)
		}
		sets[s.name] = set
	}

	markChain := c.AddChain(&nftables.Chain{Name: "mark", Table: table})
	unless := c.AddChain(&nftables.Chain{Name: "mark-unless-cluster", Table: table})
	hooked := map[string]*nftables.Chain{}
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"mark-prerouting", nftables.ChainHookPrerouting}, {"mark-output", nftables.ChainHookOutput}} {
		ch := c.AddChain(&nftables.Chain{Name: h.name, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: h.hook, Priority: nftables.ChainPriorityNATDest})
		c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: []expr.Any{
			&expr.Verdict{Kind: expr.VerdictJump, Chain: markChain.Name},
		}})
		hooked[h.name] = ch
	}
	// In-cluster traffic to a Local frontend: the node's own (output),
	// and pods' as spec.Local tells them (prerouting; without a match
	// for the family, pods cannot be told from the outside and are
	// served like it, as kube-proxy does without a local detector). The
	// mark replaces any other (IPVS matches it exactly); the masquerade
	// chain below masquerades the node's own.
	for _, fam := range []ipFamily{ipv4, ipv6} {
		c.AddRule(&nftables.Rule{Table: table, Chain: hooked["mark-output"], Exprs: internalMark(fam, sets["internal"+fam.suffix], nil)})
		for _, m := range spec.Local.Matches(fam.proto == unix.NFPROTO_IPV4) {
			c.AddRule(&nftables.Rule{Table: table, Chain: hooked["mark-prerouting"], Exprs: internalMark(fam, sets["internal"+fam.suffix], localMatch(fam, m))})
		}
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
		family := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
		}
		matches := spec.Local.Matches(fam.proto == unix.NFPROTO_IPV4)
		for _, m := range matches {
			c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: slices.Concat(family, localMatch(fam, m),
				[]expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})})
		}
		if len(matches) == 0 {
			// Without a local detector for the family nothing tells
			// pods from others: like kube-proxy, masquerade no ClusterIP
			// traffic of the family but the node's own. A process on
			// the node reaching a ClusterIP gets that address as its
			// source (the address is local, on the dummy link), and an
			// endpoint on another node would answer the address its own
			// node holds too: masquerade traffic sourced from a
			// ClusterIP.
			set := sets["cluster-ips"+fam.suffix]
			c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: slices.Concat(family, []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.src, Len: fam.size},
				&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			}, setMark())})
			c.AddRule(&nftables.Rule{Table: table, Chain: unless, Exprs: slices.Concat(family, []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}})})
		}
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
				c.AddRule(&nftables.Rule{Table: table, Chain: check, Exprs: append(localMatch(fam, LocalMatch{Source: p.Masked()}),
					&expr.Verdict{Kind: expr.VerdictReturn})})
			}
			c.AddRule(&nftables.Rule{Table: table, Chain: check, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}})
		}
	}

	masq := c.AddChain(&nftables.Chain{Name: "masquerade", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, es := range elementSets(table, spec, stamp) {
		if err := addSet(c, es.set, es.elems); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", es.set.Name, err)
		}
		sets[es.set.Name] = es.set
	}
	for _, fam := range []ipFamily{ipv4, ipv6} {
		set := sets["hairpin"+fam.suffix]
		c.AddRule(&nftables.Rule{Table: table, Chain: masq, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
			&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: fam.dst, Len: fam.size},
			&expr.Payload{DestRegister: 8 + fam.size/4, Base: expr.PayloadBaseNetworkHeader, Offset: fam.src, Len: fam.size},
			&expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID},
			&expr.Masq{},
		}})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: masq, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(MasqueradeMark), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Masq{},
	}})
	// The node's own in-cluster traffic to a Local frontend: its source
	// is a local address, often the frontend's own, which the endpoint's
	// node holds too (kube-proxy: "masquerade LOCAL traffic").
	internalMasq := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(InternalMarkMask), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
	if !spec.MasqueradeAll {
		internalMasq = append(internalMasq,
			&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)})
	}
	c.AddRule(&nftables.Rule{Table: table, Chain: masq, Exprs: append(internalMasq, &expr.Masq{})})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("ipvs: nftables: program table %s: %w", TableName, err)
	}
	return nil
}

// localMatch is the match m for a packet of family fam: "ip saddr
// <prefix>", "iifname <name>" or "iifname <prefix>*".
func localMatch(fam ipFamily, m LocalMatch) []expr.Any {
	if m.Interface != "" {
		name := []byte(m.Interface)
		if !m.NamePrefix {
			// The kernel compares the whole IFNAMSIZ buffer, NUL-padded.
			name = append(name, make([]byte, unix.IFNAMSIZ-len(name))...)
		}
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name},
		}
	}
	p := m.Source
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: fam.src, Len: fam.size},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: fam.size,
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()), Xor: make([]byte, fam.size)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
	}
}

// internalMark is "[pre] meta mark set <daddr> . meta l4proto . th
// dport map @set" for family fam: a packet to a frontend in the map gets
// its internal mark; others are left alone.
func internalMark(fam ipFamily, set *nftables.Set, pre []expr.Any) []expr.Any {
	protoReg := 8 + fam.size/4
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{fam.proto}},
	}
	out = append(out, pre...)
	return append(out,
		&expr.Payload{DestRegister: 8, Base: expr.PayloadBaseNetworkHeader, Offset: fam.dst, Len: fam.size},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
		&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: 8, SetName: set.Name, SetID: set.ID, DestRegister: 1, IsDestRegSet: true},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	)
}

// stampPrefix starts the comment that holds the spec's stamp.
const stampPrefix = "switchyard-spec "

var (
	nodePortType4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	nodePortType6 = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

// Load reads the stamp and the owned keys the table records. A missing
// table, or one without a stamp (written by an older version), gives an
// empty stamp.
func (n *NFTables) Load() (FirewallState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	before, err := n.generation()
	if err != nil {
		return FirewallState{}, n.check(err)
	}
	st, err := n.load()
	if err != nil {
		return FirewallState{}, n.check(err)
	}
	// What it read is the table as a whole when no transaction came
	// between its reads.
	after, err := n.generation()
	if err != nil {
		return FirewallState{}, n.check(err)
	}
	n.gen, n.genKnown = after, after == before
	return st, nil
}

func (n *NFTables) load() (FirewallState, error) {
	c, err := n.open(0)
	if err != nil {
		return FirewallState{}, err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return FirewallState{}, fmt.Errorf("ipvs: nftables: list tables: %w", err)
	}
	var table *nftables.Table
	for _, t := range tables {
		if t.Name == TableName {
			table = t
		}
	}
	if table == nil {
		n.stamp = ""
		return FirewallState{}, nil
	}
	var st FirewallState
	if set, err := c.GetSetByName(table, "stamp"); err == nil {
		elems, err := c.GetSetElements(set)
		if err != nil {
			return FirewallState{}, fmt.Errorf("ipvs: nftables: read set stamp: %w", err)
		}
		for _, e := range elems {
			if strings.HasPrefix(e.Comment, stampPrefix) {
				st.Stamp = strings.TrimPrefix(e.Comment, stampPrefix)
			}
		}
	}
	n.stamp = st.Stamp
	for _, fam := range []ipFamily{ipv4, ipv6} {
		set, err := c.GetSetByName(table, "owned"+fam.suffix)
		if err != nil {
			return FirewallState{}, fmt.Errorf("ipvs: nftables: read set owned%s: %w", fam.suffix, err)
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return FirewallState{}, fmt.Errorf("ipvs: nftables: read set owned%s: %w", fam.suffix, err)
		}
		for _, e := range elems {
			k, ok := parseConcatKey(e.Key, fam)
			if !ok {
				return FirewallState{}, fmt.Errorf("ipvs: nftables: set owned%s: malformed element %x", fam.suffix, e.Key)
			}
			st.Owned = append(st.Owned, k)
		}
	}
	slices.SortFunc(st.Owned, model.VirtualServiceKey.Compare)
	for _, fam := range []ipFamily{ipv4, ipv6} {
		set, err := c.GetSetByName(table, "internal"+fam.suffix)
		if err != nil {
			continue // a table older than internal marks: none
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return FirewallState{}, fmt.Errorf("ipvs: nftables: read map internal%s: %w", fam.suffix, err)
		}
		for _, e := range elems {
			k, ok := parseConcatKey(e.Key, fam)
			if !ok || len(e.Val) != 4 {
				return FirewallState{}, fmt.Errorf("ipvs: nftables: map internal%s: malformed element %x: %x", fam.suffix, e.Key, e.Val)
			}
			st.Internal = append(st.Internal, InternalMark{Key: k, Mark: binaryutil.NativeEndian.Uint32(e.Val)})
		}
	}
	slices.SortFunc(st.Internal, func(a, b InternalMark) int { return a.Key.Compare(b.Key) })
	if st.Content, err = readContent(c, table); err != nil {
		return FirewallState{}, err
	}
	return st, nil
}

// readContent reads the element sets that hold a spec's ClusterIPs,
// ExternalIPs, NodePorts and Endpoints; a set the table lacks is empty.
func readContent(c *nftables.Conn, table *nftables.Table) (FirewallSpec, error) {
	var spec FirewallSpec
	read := func(name string, each func(e nftables.SetElement) bool) error {
		set, err := c.GetSetByName(table, name)
		if err != nil {
			return nil // a table without it: the rewrite adds it
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			return fmt.Errorf("ipvs: nftables: read set %s: %w", name, err)
		}
		for _, e := range elems {
			if !each(e) {
				return fmt.Errorf("ipvs: nftables: set %s: malformed element %x", name, e.Key)
			}
		}
		return nil
	}
	addr := func(to *[]netip.Addr) func(nftables.SetElement) bool {
		return func(e nftables.SetElement) bool {
			a, ok := netip.AddrFromSlice(e.Key)
			*to = append(*to, a)
			return ok
		}
	}
	for _, fam := range []ipFamily{ipv4, ipv6} {
		n := int(fam.size)
		err := errors.Join(
			read("cluster-ips"+fam.suffix, addr(&spec.ClusterIPs)),
			read("external-ips"+fam.suffix, addr(&spec.ExternalIPs)),
			read("nodeports"+fam.suffix, func(e nftables.SetElement) bool {
				k, ok := parseConcatKey(e.Key, fam)
				spec.NodePorts = append(spec.NodePorts, k)
				return ok
			}),
			read("hairpin"+fam.suffix, func(e nftables.SetElement) bool {
				a, ok := netip.AddrFromSlice(e.Key[:min(n, len(e.Key))])
				spec.Endpoints = append(spec.Endpoints, a)
				return ok && len(e.Key) == 2*n
			}),
		)
		if err != nil {
			return FirewallSpec{}, err
		}
	}
	spec.sort()
	return spec, nil
}

// RecordOwned adds add to the owned sets and removes drop from them, in
// one transaction that touches no other set and not the stamp.
func (n *NFTables) RecordOwned(add, drop []model.VirtualServiceKey) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	before, err := n.generation()
	if err == nil {
		err = n.recordOwned(add, drop)
	}
	if err := n.check(err); err != nil {
		return err
	}
	n.written(before, false)
	return nil
}

func (n *NFTables) recordOwned(add, drop []model.VirtualServiceKey) error {
	c, err := n.open(len(add) + len(drop))
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	for _, fam := range []ipFamily{ipv4, ipv6} {
		typ := nodePortType4
		if fam == ipv6 {
			typ = nodePortType6
		}
		set := &nftables.Set{Table: table, Name: "owned" + fam.suffix, KeyType: typ, Concatenation: true}
		elems := func(keys []model.VirtualServiceKey) []nftables.SetElement {
			var out []nftables.SetElement
			for _, k := range keys {
				if k.Addr.Is4() == (fam == ipv4) {
					out = append(out, nftables.SetElement{Key: concatKey(k)})
				}
			}
			return out
		}
		if err := inChunks(elems(drop), func(ch []nftables.SetElement) error { return c.SetDeleteElements(set, ch) }); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", set.Name, err)
		}
		if err := inChunks(elems(add), func(ch []nftables.SetElement) error { return c.SetAddElements(set, ch) }); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", set.Name, err)
		}
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: %w", ErrNotFound, err)
		}
		return fmt.Errorf("ipvs: nftables: record owned services in table %s: %w", TableName, err)
	}
	return nil
}

// chunkElements bounds the elements of one netlink message: their list is
// one attribute, whose length is 16 bits.
const chunkElements = 512

// addSet adds a set and its elements, these in messages of at most
// chunkElements.
func addSet(c *nftables.Conn, set *nftables.Set, elems []nftables.SetElement) error {
	if err := c.AddSet(set, nil); err != nil {
		return err
	}
	return inChunks(elems, func(ch []nftables.SetElement) error { return c.SetAddElements(set, ch) })
}

func inChunks(elems []nftables.SetElement, f func([]nftables.SetElement) error) error {
	for ch := range slices.Chunk(elems, chunkElements) {
		if err := f(ch); err != nil {
			return err
		}
	}
	return nil
}

// newConn opens a transient nftables connection (one socket per request
// or transaction) whose buffers hold a transaction of about elems set
// elements (bufferSize).
func newConn(elems int) (*nftables.Conn, error) {
	size := bufferSize(elems)
	return nftables.New(nftables.WithSockOptions(func(nc *netlink.Conn) error { return setBuffers(nc, size) }))
}

// bufferSize is the socket buffer for a transaction of about elems set
// elements. The kernel takes a transaction in one message, which must fit
// the send buffer (EMSGSIZE otherwise), and answers each of its messages
// (one per chunkElements elements) with an acknowledgement that the
// receive buffer must hold until the transaction ends: past a few hundred
// (tens of thousands of Services) the default buffer overflows (ENOBUFS)
// after the kernel committed.
func bufferSize(elems int) int { return 1<<20 + 64*elems }

// setBuffers sets nc's send and receive buffers to size bytes.
func setBuffers(nc *netlink.Conn, size int) error {
	if err := nc.SetWriteBuffer(size); err != nil {
		return fmt.Errorf("set send buffer: %w", err)
	}
	if err := nc.SetReadBuffer(size); err != nil {
		return fmt.Errorf("set receive buffer: %w", err)
	}
	raw, err := nc.SyscallConn()
	if err != nil {
		return fmt.Errorf("set socket buffers: %w", err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		// Beyond net.core.wmem_max and rmem_max needs CAP_NET_ADMIN,
		// which programming nftables needs anyway.
		for _, opt := range []int{unix.SO_SNDBUFFORCE, unix.SO_RCVBUFFORCE} {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, size); err != nil && !errors.Is(err, unix.EPERM) {
				serr = err
			}
		}
	}); err != nil {
		return fmt.Errorf("set socket buffers: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("set socket buffers: %w", serr)
	}
	return nil
}

// addrLen is the length of an address of fam.
func addrLen(fam ipFamily) int {
	if fam == ipv4 {
		return 4
	}
	return 16
}

// elementSet is a set whose elements change with endpoints and ownership
// alone, without a rule change.
type elementSet struct {
	set   *nftables.Set
	elems []nftables.SetElement
}

// elementSets are the table's element sets for spec: hairpin4/6 (endpoint
// . endpoint), owned4/6, and stamp, whose one element's comment holds
// stamp.
func elementSets(table *nftables.Table, spec FirewallSpec, stamp string) []elementSet {
	var out []elementSet
	for _, fam := range []ipFamily{ipv4, ipv6} {
		typ := nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeIPAddr)
		if fam == ipv6 {
			typ = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeIP6Addr)
		}
		es := elementSet{set: &nftables.Set{Table: table, Name: "hairpin" + fam.suffix, KeyType: typ, Concatenation: true}}
		// Every endpoint: one allocation for the elements and one for
		// their keys, not three per endpoint.
		n := 0
		for _, a := range spec.Endpoints {
			if a.Is4() == (fam == ipv4) {
				n++
			}
		}
		es.elems = make([]nftables.SetElement, 0, n)
		keys := make([]byte, 0, 2*n*addrLen(fam))
		for _, a := range spec.Endpoints {
			if a.Is4() != (fam == ipv4) {
				continue
			}
			start := len(keys)
			if fam == ipv4 {
				b := a.As4()
				keys = append(append(keys, b[:]...), b[:]...)
			} else {
				b := a.As16()
				keys = append(append(keys, b[:]...), b[:]...)
			}
			es.elems = append(es.elems, nftables.SetElement{Key: keys[start:len(keys):len(keys)]})
		}
		out = append(out, es)
	}
	for _, fam := range []ipFamily{ipv4, ipv6} {
		typ := nodePortType4
		if fam == ipv6 {
			typ = nodePortType6
		}
		es := elementSet{set: &nftables.Set{Table: table, Name: "owned" + fam.suffix, KeyType: typ, Concatenation: true}}
		for _, k := range spec.Owned {
			if k.Addr.Is4() == (fam == ipv4) {
				es.elems = append(es.elems, nftables.SetElement{Key: concatKey(k)})
			}
		}
		out = append(out, es)
	}
	return append(out, elementSet{
		set:   &nftables.Set{Table: table, Name: "stamp", KeyType: nftables.TypeInetService},
		elems: []nftables.SetElement{{Key: []byte{0, 0}, Comment: stampPrefix + stamp}},
	})
}

// Update applies delta's element changes and its stamp in one
// transaction.
func (n *NFTables) Update(delta FirewallDelta) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stamp == "" || n.stamp != delta.From {
		return fmt.Errorf("ipvs: nftables: update table %s: it holds stamp %q, not %q: %w", TableName, n.stamp, delta.From, ErrNotFound)
	}
	n.stamp = "" // unknown until the transaction succeeds
	before, err := n.generation()
	if err == nil {
		err = n.update(delta)
	}
	if err := n.check(err); err != nil {
		return err
	}
	n.written(before, false)
	n.stamp = delta.To
	return nil
}

func (n *NFTables) update(delta FirewallDelta) error {
	c, err := n.open(2*len(delta.Add.Endpoints) + 2*len(delta.Remove.Endpoints) + delta.Add.elementCount() + delta.Remove.elementCount())
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	stamp := &nftables.Set{Table: table, Name: "stamp", KeyType: nftables.TypeInetService}
	for _, es := range append(deltaSets(table, delta.Remove), elementSet{set: stamp, elems: []nftables.SetElement{{Key: []byte{0, 0}}}}) {
		if err := inChunks(es.elems, func(ch []nftables.SetElement) error { return c.SetDeleteElements(es.set, ch) }); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", es.set.Name, err)
		}
	}
	for _, es := range append(deltaSets(table, delta.Add), elementSet{set: stamp, elems: []nftables.SetElement{{Key: []byte{0, 0}, Comment: stampPrefix + delta.To}}}) {
		if err := inChunks(es.elems, func(ch []nftables.SetElement) error { return c.SetAddElements(es.set, ch) }); err != nil {
			return fmt.Errorf("ipvs: nftables set %s: %w", es.set.Name, err)
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("ipvs: nftables: update sets of table %s: %w", TableName, err)
	}
	return nil
}

// deltaSets are the sets and map that hold spec's ClusterIPs,
// ExternalIPs, NodePorts, Endpoints (hairpin) and Internal, with those
// elements.
func deltaSets(table *nftables.Table, spec FirewallSpec) []elementSet {
	var out []elementSet
	for _, fam := range []ipFamily{ipv4, ipv6} {
		v4 := fam == ipv4
		addrType, npType := nftables.TypeIPAddr, nodePortType4
		if !v4 {
			addrType, npType = nftables.TypeIP6Addr, nodePortType6
		}
		addrs := func(name string, as []netip.Addr) elementSet {
			es := elementSet{set: &nftables.Set{Table: table, Name: name + fam.suffix, KeyType: addrType}}
			for _, a := range as {
				if a.Is4() == v4 {
					es.elems = append(es.elems, nftables.SetElement{Key: a.AsSlice()})
				}
			}
			return es
		}
		nps := elementSet{set: &nftables.Set{Table: table, Name: "nodeports" + fam.suffix, KeyType: npType, Concatenation: true}}
		for _, k := range spec.NodePorts {
			if k.Addr.Is4() == v4 {
				nps.elems = append(nps.elems, nftables.SetElement{Key: concatKey(k)})
			}
		}
		internal := elementSet{set: &nftables.Set{Table: table, Name: "internal" + fam.suffix, KeyType: npType,
			DataType: nftables.TypeMark, IsMap: true, Concatenation: true}}
		for _, im := range spec.Internal {
			if im.Key.Addr.Is4() == v4 {
				internal.elems = append(internal.elems, nftables.SetElement{Key: concatKey(im.Key), Val: binaryutil.NativeEndian.PutUint32(im.Mark)})
			}
		}
		out = append(out, addrs("cluster-ips", spec.ClusterIPs), addrs("external-ips", spec.ExternalIPs), nps, internal)
	}
	hairpin := elementSets(table, FirewallSpec{Endpoints: spec.Endpoints}, "")
	return append(out, hairpin[0], hairpin[1]) // hairpin4, hairpin6
}

// parseConcatKey undoes concatKey.
func parseConcatKey(b []byte, fam ipFamily) (model.VirtualServiceKey, bool) {
	n := int(fam.size)
	if len(b) != n+8 {
		return model.VirtualServiceKey{}, false
	}
	addr, _ := netip.AddrFromSlice(b[:n])
	var p model.Protocol
	switch b[n] {
	case 0: // a firewall-mark service's key (owned sets)
		k := model.VirtualServiceKey{Addr: addr}
		if _, ok := MarkOf(k); !ok || b[n+4] != 0 || b[n+5] != 0 {
			return model.VirtualServiceKey{}, false
		}
		return k, true
	case unix.IPPROTO_TCP:
		p = model.TCP
	case unix.IPPROTO_UDP:
		p = model.UDP
	case unix.IPPROTO_SCTP:
		p = model.SCTP
	default:
		return model.VirtualServiceKey{}, false
	}
	return model.VirtualServiceKey{Addr: addr, Protocol: p, Port: uint16(b[n+4])<<8 | uint16(b[n+5])}, true
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

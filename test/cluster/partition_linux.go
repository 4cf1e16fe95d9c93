package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/arp"
	"golang.org/x/sys/unix"
)

// partitionTable is the router's nftables table (bridge family) that
// partitions the LAN.
const partitionTable = "cluster-partition"

// Partition cuts the nodes of cut off from the other nodes on the LAN:
// the router's bridge drops every frame between a node of cut and a node
// not in it (nftables, bridge family), gossip, ARP and forwarded traffic
// alike, while every node still reaches the router (and the client
// beyond it). A later Partition replaces it; Heal ends it.
func (t *Topology) Partition(cut ...*Node) error {
	var in, out []string
	for _, n := range t.Nodes {
		if slices.Contains(cut, n) {
			in = append(in, "lan-"+n.Name)
		} else {
			out = append(out, "lan-"+n.Name)
		}
	}
	err := t.onPartitionTable(func(c *nftables.Conn, table *nftables.Table) {
		c.AddTable(table) // a fresh one: replaces an earlier partition
		chain := c.AddChain(&nftables.Chain{
			Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
		})
		for _, a := range in {
			for _, b := range out {
				c.AddRule(dropBetween(table, chain, a, b))
				c.AddRule(dropBetween(table, chain, b, a))
			}
		}
	})
	if err != nil {
		return fmt.Errorf("cluster: partition %v from %v: %w", in, out, err)
	}
	return nil
}

// Heal ends a Partition.
func (t *Topology) Heal() error {
	if err := t.onPartitionTable(func(*nftables.Conn, *nftables.Table) {}); err != nil {
		return fmt.Errorf("cluster: heal the partition: %w", err)
	}
	return nil
}

// onPartitionTable deletes the router's partition table, lets fill
// recreate it, and commits both in one batch.
func (t *Topology) onPartitionTable(fill func(*nftables.Conn, *nftables.Table)) error {
	return t.Router.Do(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		table := &nftables.Table{Name: partitionTable, Family: nftables.TableFamilyBridge}
		c.AddTable(table) // so that deleting it cannot fail
		c.DelTable(table)
		fill(c, table)
		return c.Flush()
	})
}

// dropBetween drops frames the bridge forwards from port from to port to.
func dropBetween(table *nftables.Table, chain *nftables.Chain, from, to string) *nftables.Rule {
	return &nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(from)},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(to)},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}}
}

// ifname is an interface name as nftables compares it: IFNAMSIZ bytes,
// NUL padded.
func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

// ARPSample is one question the router asked: who has the address, and
// who answered before the next question (ARP replies from any node,
// gratuitous ones included).
type ARPSample struct {
	At      time.Time
	Answers []net.HardwareAddr
}

// ARPSampler asks from the router's LAN bridge, every interval, who has
// one address, and records who answered each question.
type ARPSampler struct {
	c    *arp.Client
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	samples []ARPSample
	err     error
}

// SampleARP starts sampling who answers ARP for ip at the router until
// Stop.
func (t *Topology) SampleARP(ip netip.Addr, interval time.Duration) (*ARPSampler, error) {
	var c *arp.Client
	err := t.Router.Do(func() error {
		ifi, err := net.InterfaceByName("lan0")
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: ARP sampler on the router's lan0: %w", err)
	}
	s := &ARPSampler{c: c, stop: make(chan struct{})}
	s.wg.Go(func() { s.read(ip) })
	s.wg.Go(func() { s.ask(ip, interval) })
	return s, nil
}

// ask sends a request for ip every interval, each opening a sample.
func (s *ARPSampler) ask(ip netip.Addr, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.mu.Lock()
		s.samples = append(s.samples, ARPSample{At: time.Now()})
		s.mu.Unlock()
		if err := s.c.Request(ip); err != nil {
			s.fail(fmt.Errorf("ARP request for %s: %w", ip, err))
			return
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

// read records every ARP reply for ip in the open sample.
func (s *ARPSampler) read(ip netip.Addr) {
	for {
		p, _, err := s.c.Read()
		if err != nil {
			select {
			case <-s.stop:
			default:
				s.fail(fmt.Errorf("read ARP: %w", err))
			}
			return
		}
		if p.Operation != arp.OperationReply || p.SenderIP != ip {
			continue
		}
		s.mu.Lock()
		if n := len(s.samples); n > 0 {
			last := &s.samples[n-1]
			if !slices.ContainsFunc(last.Answers, func(m net.HardwareAddr) bool { return m.String() == p.SenderHardwareAddr.String() }) {
				last.Answers = append(last.Answers, p.SenderHardwareAddr)
			}
		}
		s.mu.Unlock()
	}
}

func (s *ARPSampler) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// Samples returns the samples so far (the last one may still be open).
func (s *ARPSampler) Samples() []ARPSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// Stop ends sampling and returns every sample, the last one (still
// open) dropped, and the error that ended sampling early, if any.
func (s *ARPSampler) Stop() ([]ARPSample, error) {
	close(s.stop)
	_ = s.c.SetReadDeadline(time.Now()) // unblocks read
	s.wg.Wait()
	err := s.c.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.samples
	if len(out) > 0 {
		out = out[:len(out)-1]
	}
	return out, errors.Join(s.err, err)
}

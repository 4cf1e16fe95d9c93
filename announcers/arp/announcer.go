package arp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/ipv6"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Name is the announcer's name in configuration and metrics.
const Name = "arp"

// ErrClosed is returned by Announce after Close.
var ErrClosed = errors.New("arp announcer closed")

// Options tune an Announcer. The zero value is usable.
type Options struct {
	// OnError, when set, receives errors of the background work: failed
	// reads and replies, and failed repeated announcements and their
	// group joins (with link ""). It must not block or call the Announcer.
	OnError func(link string, err error)
	// OnAnnounce, when set, is called after the gratuitous messages for
	// addr went out on link: a hook for metrics and measurements. It runs
	// under the Announcer's lock: it must not block or call the Announcer.
	OnAnnounce func(link string, addr netip.Addr, at time.Time)
	// Repeats is how many more times a gained address is announced,
	// RepeatInterval apart, in case a gratuitous message is lost: 0 means
	// DefaultRepeats, a negative value none.
	Repeats int
	// RepeatInterval is 0 for DefaultRepeatInterval.
	RepeatInterval time.Duration
}

// Defaults of Options.
const (
	DefaultRepeats        = 2
	DefaultRepeatInterval = time.Second
)

// Announcer answers address resolution for the addresses it owns on its
// links. It is safe for concurrent use.
type Announcer struct {
	links []Link
	opts  Options

	mu      sync.RWMutex
	owned   map[netip.Addr]bool // value: gratuitous messages sent everywhere
	groups  map[groupKey]int    // solicited-node group memberships by link
	joined  map[linkAddr]bool   // owned IPv6 addresses whose group is joined
	repeats map[netip.Addr]*repeat
	closed  bool
	done    chan struct{} // closed by Close
	readers sync.WaitGroup

	healthMu sync.Mutex
	failing  map[string]error // reader ("eth0/arp") → its last read error

	// checkLink, when set, says whether a link's interface is still
	// there and up (Listen sets it; links given to New are the caller's).
	checkLink func(index int, name string) error

	// afterFunc is time.AfterFunc; tests replace it.
	afterFunc func(time.Duration, func()) (stop func() bool)
}

// repeat is the pending re-announcement of one address.
type repeat struct {
	left int
	stop func() bool
}

type groupKey struct {
	link  int
	group netip.Addr
}

type linkAddr struct {
	link int
	addr netip.Addr
}

var (
	_ plugin.Announcer      = (*Announcer)(nil)
	_ plugin.HealthReporter = (*Announcer)(nil)
)

// New starts answering on links, with no address owned yet. The Announcer
// takes over the links' sockets and closes them on Close.
func New(links []Link, opts Options) *Announcer {
	a := &Announcer{
		links:   links,
		opts:    opts,
		owned:   make(map[netip.Addr]bool),
		groups:  make(map[groupKey]int),
		joined:  make(map[linkAddr]bool),
		repeats: make(map[netip.Addr]*repeat),
		done:    make(chan struct{}),
		failing: make(map[string]error),
		afterFunc: func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(d, f).Stop
		},
	}
	if a.opts.Repeats == 0 {
		a.opts.Repeats = DefaultRepeats
	}
	if a.opts.RepeatInterval <= 0 {
		a.opts.RepeatInterval = DefaultRepeatInterval
	}
	for i := range a.links {
		l := &a.links[i]
		if l.ARP != nil {
			a.readers.Add(1)
			go a.readARP(l)
		}
		if l.NDP != nil {
			a.readers.Add(1)
			go a.readNDP(l)
		}
	}
	return a
}

// Name implements plugin.Announcer.
func (a *Announcer) Name() string { return Name }

// Announce makes set the owned addresses: requests for them are answered
// from now on, and each address not owned before is announced with
// gratuitous ARP or an unsolicited neighbour advertisement on every link
// of its family, and again Options.Repeats times while it stays owned.
// Addresses left out are no longer answered. An error
// leaves the set in place; announcements that failed are retried by the
// next call. Failures of one address are plugin.AddrErrors.
func (a *Announcer) Announce(ctx context.Context, set []model.Announcement) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("announcing: %w", err)
	}
	want := make(map[netip.Addr]bool, len(set))
	for _, s := range set {
		addr := s.Addr.Unmap().WithZone("")
		if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
			return &plugin.AddrError{Addr: s.Addr, Err: fmt.Errorf("for %v: not a unicast address", s.Service)}
		}
		want[addr] = true
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	var errs []error
	for addr := range a.owned {
		if !want[addr] {
			delete(a.owned, addr)
			a.cancelRepeat(addr)
			if addr.Is6() {
				for _, err := range a.leave(addr) {
					errs = append(errs, &plugin.AddrError{Addr: addr, Withdraw: true, Err: err})
				}
			}
		}
	}
	for addr := range want {
		done, ok := a.owned[addr]
		if ok && done {
			continue
		}
		if !ok {
			a.scheduleRepeat(addr, a.opts.Repeats)
		}
		for _, err := range a.gain(addr) {
			errs = append(errs, &plugin.AddrError{Addr: addr, Err: err})
		}
	}
	return errors.Join(errs...)
}

// gain joins addr's solicited-node groups (IPv6) and announces it, and
// marks it done only when both succeeded. The address is answered even
// when they fail; the next Announce or repeat retries both. Called with
// mu held.
func (a *Announcer) gain(addr netip.Addr) []error {
	var failed []error
	if addr.Is6() {
		failed = a.join(addr)
	}
	if err := a.announce(addr); err != nil {
		failed = append(failed, err)
	}
	a.owned[addr] = len(failed) == 0
	return failed
}

// scheduleRepeat arms the next of left re-announcements of addr. Called
// with mu held.
func (a *Announcer) scheduleRepeat(addr netip.Addr, left int) {
	if left <= 0 {
		delete(a.repeats, addr)
		return
	}
	r := &repeat{left: left}
	a.repeats[addr] = r
	r.stop = a.afterFunc(a.opts.RepeatInterval, func() { a.fireRepeat(addr, r) })
}

// cancelRepeat stops addr's pending re-announcement. Called with mu held.
func (a *Announcer) cancelRepeat(addr netip.Addr) {
	if r, ok := a.repeats[addr]; ok {
		r.stop()
		delete(a.repeats, addr)
	}
}

func (a *Announcer) fireRepeat(addr netip.Addr, r *repeat) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A withdrawal, or a withdrawal and a new gain, replaced r.
	if a.closed || a.repeats[addr] != r {
		return
	}
	// A repeat also retries a failed join: marking the address done
	// after the announcement alone would stop Announce retrying it.
	if failed := a.gain(addr); len(failed) > 0 && a.opts.OnError != nil {
		a.opts.OnError("", errors.Join(failed...))
	}
	a.scheduleRepeat(addr, r.left-1)
}

// announce sends the gratuitous messages for addr on every link of its
// family. Called with mu held.
func (a *Announcer) announce(addr netip.Addr) error {
	var errs []error
	sent := false
	for i := range a.links {
		l := &a.links[i]
		var err error
		switch {
		case !l.serves(addr):
			continue
		case addr.Is4() && l.ARP != nil:
			err = gratuitousARP(l, addr)
		case addr.Is6() && l.NDP != nil:
			err = unsolicitedNA(l, addr)
		default:
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("announcing %s on %s: %w", addr, l.Name, err))
			continue
		}
		sent = true
		if a.opts.OnAnnounce != nil {
			a.opts.OnAnnounce(l.Name, addr, time.Now())
		}
	}
	if !sent && len(errs) == 0 {
		return fmt.Errorf("announcing %s: no configured interface serves its family and subnet", addr)
	}
	return errors.Join(errs...)
}

// gratuitousARP sends a gratuitous request (tha = broadcast, the form a
// Linux neighbour honours within its locktime) and a gratuitous reply
// (tha = sha, the form Linux' arp_is_garp recognises).
func gratuitousARP(l *Link, addr netip.Addr) error {
	req, err := arp.NewPacket(arp.OperationRequest, l.MAC, addr, ethernet.Broadcast, addr)
	if err != nil {
		return fmt.Errorf("building gratuitous request: %w", err)
	}
	if err := l.ARP.WriteTo(req, ethernet.Broadcast); err != nil {
		return fmt.Errorf("sending gratuitous request: %w", err)
	}
	rep, err := arp.NewPacket(arp.OperationReply, l.MAC, addr, l.MAC, addr)
	if err != nil {
		return fmt.Errorf("building gratuitous reply: %w", err)
	}
	if err := l.ARP.WriteTo(rep, ethernet.Broadcast); err != nil {
		return fmt.Errorf("sending gratuitous reply: %w", err)
	}
	return nil
}

var allNodes = netip.MustParseAddr("ff02::1")

func unsolicitedNA(l *Link, addr netip.Addr) error {
	return sendNA(l, addr, allNodes, false)
}

func sendNA(l *Link, target, dst netip.Addr, solicited bool) error {
	na := &ndp.NeighborAdvertisement{
		Solicited:     solicited,
		Override:      true,
		TargetAddress: target,
		Options: []ndp.Option{&ndp.LinkLayerAddress{
			Direction: ndp.Target,
			Addr:      l.MAC,
		}},
	}
	cm := &ipv6.ControlMessage{HopLimit: ndp.HopLimit, IfIndex: l.Index}
	if l.LinkLocal.IsValid() {
		cm.Src = l.LinkLocal.AsSlice()
	}
	if err := l.NDP.WriteTo(na, cm, dst); err != nil {
		return fmt.Errorf("sending neighbour advertisement to %s: %w", dst, err)
	}
	return nil
}

// join subscribes every IPv6 link serving addr to its solicited-node
// group, once per address and link. Called with mu held.
func (a *Announcer) join(addr netip.Addr) []error {
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return []error{fmt.Errorf("solicited-node group of %s: %w", addr, err)}
	}
	var errs []error
	for i := range a.links {
		l := &a.links[i]
		la := linkAddr{link: i, addr: addr}
		if l.NDP == nil || !l.serves(addr) || a.joined[la] {
			continue
		}
		k := groupKey{link: i, group: group}
		if a.groups[k] == 0 {
			if err := l.NDP.JoinGroup(group); err != nil {
				errs = append(errs, fmt.Errorf("joining %s on %s: %w", group, l.Name, err))
				continue
			}
		}
		a.groups[k]++
		a.joined[la] = true
	}
	return errs
}

// leave undoes join. Called with mu held.
func (a *Announcer) leave(addr netip.Addr) []error {
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return []error{fmt.Errorf("solicited-node group of %s: %w", addr, err)}
	}
	var errs []error
	for i := range a.links {
		la := linkAddr{link: i, addr: addr}
		if !a.joined[la] {
			continue
		}
		delete(a.joined, la)
		k := groupKey{link: i, group: group}
		if a.groups[k]--; a.groups[k] > 0 {
			continue
		}
		delete(a.groups, k)
		if err := a.links[i].NDP.LeaveGroup(group); err != nil {
			errs = append(errs, fmt.Errorf("leaving %s on %s: %w", group, a.links[i].Name, err))
		}
	}
	return errs
}

// Owned returns the addresses answered now, in ascending order.
func (a *Announcer) Owned() []netip.Addr {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]netip.Addr, 0, len(a.owned))
	for addr := range a.owned {
		out = append(out, addr)
	}
	sortAddrs(out)
	return out
}

func (a *Announcer) owns(addr netip.Addr) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	_, ok := a.owned[addr]
	return ok && !a.closed
}

func (a *Announcer) isClosed() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.closed
}

// Close stops answering and closes the sockets. It does not withdraw
// anything on the wire: neighbours keep their entries until the new owner
// announces or they expire.
func (a *Announcer) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	close(a.done)
	for addr := range a.repeats {
		a.cancelRepeat(addr)
	}
	var errs []error
	for i := range a.links {
		errs = append(errs, a.links[i].close())
	}
	a.mu.Unlock()
	a.readers.Wait()
	return errors.Join(errs...)
}

func (a *Announcer) report(l *Link, err error) {
	if a.opts.OnError != nil {
		a.opts.OnError(l.Name, err)
	}
}

// Healthy reports the links whose interface is gone or down (for an
// Announcer from Listen) and the readers whose last read failed: while
// either holds, the link is not answered.
func (a *Announcer) Healthy() error {
	var errs []error
	if a.checkLink != nil {
		for i := range a.links {
			if err := a.checkLink(a.links[i].Index, a.links[i].Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	a.healthMu.Lock()
	defer a.healthMu.Unlock()
	keys := make([]string, 0, len(a.failing))
	for k := range a.failing {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		errs = append(errs, a.failing[k])
	}
	return errors.Join(errs...)
}

// reader tracks one background reader's consecutive failures.
type reader struct {
	a       *Announcer
	l       *Link
	key     string
	backoff time.Duration
}

const (
	minReadBackoff = 100 * time.Millisecond
	maxReadBackoff = 5 * time.Second
)

// ok records a successful read.
func (r *reader) ok() {
	if r.backoff == 0 {
		return
	}
	r.backoff = 0
	r.a.healthMu.Lock()
	delete(r.a.failing, r.key)
	r.a.healthMu.Unlock()
}

// failed handles a read error: it reports whether the reader must stop
// (the Announcer is closing); otherwise it records and reports the error
// and waits, longer after each consecutive failure, so that a broken
// socket neither spins nor floods OnError.
func (r *reader) failed(err error) (stop bool) {
	if r.a.isClosed() || errors.Is(err, net.ErrClosed) {
		return true
	}
	r.a.healthMu.Lock()
	r.a.failing[r.key] = err
	r.a.healthMu.Unlock()
	r.a.report(r.l, err)
	r.backoff = min(max(2*r.backoff, minReadBackoff), maxReadBackoff)
	t := time.NewTimer(r.backoff)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-r.a.done:
		return true
	}
}

func (a *Announcer) readARP(l *Link) {
	defer a.readers.Done()
	r := &reader{a: a, l: l, key: l.Name + "/arp"}
	for {
		p, eth, err := l.ARP.Read()
		if err != nil {
			if r.failed(fmt.Errorf("reading ARP on %s: %w", l.Name, err)) {
				return
			}
			continue
		}
		r.ok()
		if !a.shouldReplyARP(l, p, eth) {
			continue
		}
		rep, err := arp.NewPacket(arp.OperationReply, l.MAC, p.TargetIP, p.SenderHardwareAddr, p.SenderIP)
		if err == nil {
			err = l.ARP.WriteTo(rep, p.SenderHardwareAddr)
		}
		if err != nil {
			a.report(l, fmt.Errorf("replying to ARP request for %s from %s on %s: %w",
				p.TargetIP, p.SenderHardwareAddr, l.Name, err))
		}
	}
}

func (a *Announcer) shouldReplyARP(l *Link, p *arp.Packet, eth *ethernet.Frame) bool {
	if p.Operation != arp.OperationRequest {
		return false
	}
	// A packet socket sees our own gratuitous requests.
	if bytes.Equal(p.SenderHardwareAddr, l.MAC) {
		return false
	}
	// Another node's gratuitous ARP is not a question.
	if p.SenderIP == p.TargetIP {
		return false
	}
	if !bytes.Equal(eth.Destination, ethernet.Broadcast) && !bytes.Equal(eth.Destination, l.MAC) {
		return false
	}
	return l.serves(p.TargetIP) && a.owns(p.TargetIP)
}

func (a *Announcer) readNDP(l *Link) {
	defer a.readers.Done()
	r := &reader{a: a, l: l, key: l.Name + "/ndp"}
	for {
		m, cm, src, err := l.NDP.ReadFrom()
		if err != nil {
			if r.failed(fmt.Errorf("reading ICMPv6 on %s: %w", l.Name, err)) {
				return
			}
			continue
		}
		r.ok()
		ns, ok := m.(*ndp.NeighborSolicitation)
		if !ok || (cm != nil && cm.IfIndex != 0 && cm.IfIndex != l.Index) {
			continue
		}
		if target := ns.TargetAddress.WithZone(""); !l.serves(target) || !a.owns(target) {
			continue
		}
		// A solicitation from the unspecified address is duplicate
		// address detection: answer all nodes (RFC 4861 7.2.4).
		dst, solicited := src, true
		if src.IsUnspecified() {
			dst, solicited = allNodes, false
		}
		if err := sendNA(l, ns.TargetAddress.WithZone(""), dst, solicited); err != nil {
			a.report(l, fmt.Errorf("answering solicitation for %s from %s on %s: %w",
				ns.TargetAddress, src, l.Name, err))
		}
	}
}

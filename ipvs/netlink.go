package ipvs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	cipvs "github.com/cloudflare/ipvs"
	"github.com/cloudflare/ipvs/netmask"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Netlink is the Kernel of the running host, over cloudflare/ipvs (generic
// netlink; no ipvsadm). It uses the network namespace of the thread that
// created it.
type Netlink struct {
	mu sync.Mutex // serialises requests on the one netlink socket
	c  cipvs.Client
	// proc is the namespace's /proc/net/ip_vs, opened with the socket so
	// that it shows the same namespace whichever thread reads it; nil
	// when it could not be opened (ReadTable fails then).
	proc *os.File
	// b sends Batch's commands, on a socket of its own.
	b *nlBatch
}

var (
	_ Kernel      = (*Netlink)(nil)
	_ TableReader = (*Netlink)(nil)
	_ Batcher     = (*Netlink)(nil)
)

// NewNetlink connects to the kernel's IPVS. It fails where IPVS is missing
// (no ip_vs module).
func NewNetlink() (*Netlink, error) {
	c, err := cipvs.New()
	if err != nil {
		return nil, fmt.Errorf("ipvs: connect to the kernel: %w", err)
	}
	// /proc/net is the main thread's namespace; thread-self is this
	// thread's, the socket's.
	proc, _ := os.Open("/proc/thread-self/net/ip_vs")
	b, err := newNLBatch()
	if err != nil {
		if proc != nil {
			proc.Close()
		}
		return nil, errors.Join(fmt.Errorf("ipvs: connect to the kernel for batches: %w", err), closeClient(c))
	}
	return &Netlink{c: c, proc: proc, b: b}, nil
}

func closeClient(c cipvs.Client) error {
	if c, ok := c.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Close releases the netlink socket.
func (n *Netlink) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		n.proc.Close()
	}
	return errors.Join(n.b.close(), closeClient(n.c))
}

// Batch runs cmds several per round trip (Batcher): up to a few hundred
// requests in one sendmsg(2), the kernel answering only the ones that fail
// and the last. The single calls stay one request per round trip, as
// cloudflare/ipvs sends them.
func (n *Netlink) Batch(cmds []Command) []error {
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = validateCommand(c)
	}
	n.mu.Lock()
	n.b.run(cmds, errs, describeCommand)
	n.mu.Unlock()
	return errs
}

// validateCommand checks c as the single call would before sending it.
func validateCommand(c Command) error {
	op, service := c.op()
	var err error
	switch {
	case service && c.Kind != CmdDeleteService:
		err = ValidateService(c.Service)
	case !service:
		d := c.Dest
		if c.Kind == CmdDeleteDestination {
			d = Destination{DestinationKey: d.DestinationKey}
		}
		err = ValidateDestination(c.Service.VirtualServiceKey, d)
	}
	if err != nil {
		if service {
			return fmt.Errorf("ipvs: %s service: %w", op, err)
		}
		return fmt.Errorf("ipvs: %s destination: %w", op, err)
	}
	return nil
}

// describeCommand wraps the kernel's error for c as the single call does.
func describeCommand(c Command, err error) error {
	op, service := c.op()
	if service {
		return serviceErr(op, c.Service, err)
	}
	return destinationErr(op, c.Service.VirtualServiceKey, c.Dest, err)
}

// op names c's call ("add", "update", "delete") and tells a service's from
// a destination's.
func (c Command) op() (op string, service bool) {
	switch c.Kind {
	case CmdAddService:
		return "add", true
	case CmdUpdateService:
		return "update", true
	case CmdDeleteService:
		return "delete", true
	case CmdAddDestination:
		return "add", false
	case CmdUpdateDestination:
		return "update", false
	}
	return "delete", false
}

// serviceErr is the error of a service call.
func serviceErr(op string, s Service, err error) error {
	if op != "delete" && errors.Is(err, syscall.ENOENT) {
		// For a service the kernel says ENOENT when it has no such
		// scheduler module.
		return fmt.Errorf("ipvs: %s service %s: scheduler %q not available: %w", op, keyString(s.VirtualServiceKey), s.Scheduler, err)
	}
	return fmt.Errorf("ipvs: %s service %s: %w", op, keyString(s.VirtualServiceKey), kernelErr(err))
}

// destinationErr is the error of a destination call.
func destinationErr(op string, k model.VirtualServiceKey, d Destination, err error) error {
	return fmt.Errorf("ipvs: %s destination %s of %s: %w", op, d.Addr, keyString(k), kernelErr(err))
}

// ReadTable reads /proc/net/ip_vs in one pass.
func (n *Netlink) ReadTable() (map[model.VirtualServiceKey][]DestinationState, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil, errors.New("ipvs: /proc/net/ip_vs could not be opened")
	}
	if _, err := n.proc.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("ipvs: read /proc/net/ip_vs: %w", err)
	}
	return ParseProcTable(n.proc)
}

// Services lists the virtual services; a firewall-mark service has a
// MarkKey.
func (n *Netlink) Services() ([]Service, error) {
	n.mu.Lock()
	list, err := n.c.Services()
	n.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil // an empty table; see Destinations
	}
	if err != nil {
		return nil, fmt.Errorf("ipvs: list services: %w", kernelErr(err))
	}
	out := make([]Service, 0, len(list))
	for _, s := range list {
		if svc, ok := fromLibService(s.Service); ok {
			out = append(out, svc)
		}
	}
	SortServices(out)
	return out, nil
}

// Service reads one service (a get, not a dump).
func (n *Netlink) Service(k model.VirtualServiceKey) (Service, error) {
	n.mu.Lock()
	ls, err := n.c.Service(libKey(k))
	n.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) { // no answer
		return Service{}, fmt.Errorf("ipvs: get service %s: %w", keyString(k), ErrNotFound)
	}
	if err != nil { // ESRCH: none
		return Service{}, fmt.Errorf("ipvs: get service %s: %w", keyString(k), kernelErr(err))
	}
	s, ok := fromLibService(ls.Service)
	if !ok || s.VirtualServiceKey != k {
		return Service{}, fmt.Errorf("ipvs: get service %s: the kernel answered with %s", keyString(k), keyString(s.VirtualServiceKey))
	}
	return s, nil
}

func (n *Netlink) AddService(s Service) error {
	return n.serviceOp("add", s, n.c.CreateService)
}

func (n *Netlink) UpdateService(s Service) error {
	return n.serviceOp("update", s, n.c.UpdateService)
}

func (n *Netlink) serviceOp(op string, s Service, fn func(cipvs.Service) error) error {
	if err := ValidateService(s); err != nil {
		return fmt.Errorf("ipvs: %s service: %w", op, err)
	}
	n.mu.Lock()
	err := fn(toLibService(s))
	n.mu.Unlock()
	if err != nil {
		return serviceErr(op, s, err)
	}
	return nil
}

func (n *Netlink) DeleteService(k model.VirtualServiceKey) error {
	n.mu.Lock()
	err := n.c.RemoveService(libKey(k))
	n.mu.Unlock()
	if err != nil {
		return serviceErr("delete", Service{VirtualServiceKey: k}, err)
	}
	return nil
}

func (n *Netlink) Destinations(k model.VirtualServiceKey) ([]DestinationState, error) {
	n.mu.Lock()
	list, err := n.c.Destinations(libKey(k))
	n.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		// cloudflare/ipvs reports an empty dump this way.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ipvs: list destinations of %s: %w", keyString(k), kernelErr(err))
	}
	out := make([]DestinationState, 0, len(list))
	for _, d := range list {
		// Stats64 is the kernel's 64-bit copy (Linux 4.1 and later);
		// older kernels send only the 32-bit one.
		st := d.Stats64
		if st == (cipvs.Stats{}) {
			st = d.Stats
		}
		out = append(out, DestinationState{
			Destination: Destination{
				DestinationKey: DestinationKey{Addr: d.Address, Port: d.Port},
				Weight:         d.Weight,
				Tunnel:         fromLibTunnel(d.Destination),
			},
			ActiveConns:   d.ActiveConnections,
			InactiveConns: d.InactiveConnections,
			ConnRate:      st.ConnectionRate,
			BytesInRate:   st.IncomingByteRate,
			BytesOutRate:  st.OutgoingByteRate,
		})
	}
	SortDestinations(out)
	return out, nil
}

func (n *Netlink) AddDestination(k model.VirtualServiceKey, d Destination) error {
	return n.destinationOp("add", k, d, n.c.CreateDestination)
}

func (n *Netlink) UpdateDestination(k model.VirtualServiceKey, d Destination) error {
	return n.destinationOp("update", k, d, n.c.UpdateDestination)
}

func (n *Netlink) DeleteDestination(k model.VirtualServiceKey, d DestinationKey) error {
	return n.destinationOp("delete", k, Destination{DestinationKey: d}, n.c.RemoveDestination)
}

func (n *Netlink) destinationOp(op string, k model.VirtualServiceKey, d Destination, fn func(cipvs.Service, cipvs.Destination) error) error {
	if err := ValidateDestination(k, d); err != nil {
		return fmt.Errorf("ipvs: %s destination: %w", op, err)
	}
	n.mu.Lock()
	err := fn(libKey(k), toLibDestination(d))
	n.mu.Unlock()
	if err != nil {
		return destinationErr(op, k, d, err)
	}
	return nil
}

func (n *Netlink) Timeouts() (Timeouts, error) {
	n.mu.Lock()
	c, err := n.c.Config()
	n.mu.Unlock()
	if err != nil {
		return Timeouts{}, fmt.Errorf("ipvs: read timeouts: %w", err)
	}
	return Timeouts{
		TCP:    time.Duration(c.TCPTimeout) * time.Second,
		TCPFin: time.Duration(c.TCPFinTimeout) * time.Second,
		UDP:    time.Duration(c.UDPTimeout) * time.Second,
	}, nil
}

// SetTimeouts sends every field; the kernel skips the zero ones.
func (n *Netlink) SetTimeouts(t Timeouts) error {
	if err := ValidateTimeouts(t); err != nil {
		return fmt.Errorf("ipvs: set timeouts: %w", err)
	}
	n.mu.Lock()
	err := n.c.SetConfig(cipvs.Config{
		TCPTimeout:    uint32(t.TCP / time.Second),
		TCPFinTimeout: uint32(t.TCPFin / time.Second),
		UDPTimeout:    uint32(t.UDP / time.Second),
	})
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("ipvs: set timeouts tcp %s tcpfin %s udp %s: %w", t.TCP, t.TCPFin, t.UDP, err)
	}
	return nil
}

// kernelErr adds ErrExists or ErrNotFound to the kernel's errno: EEXIST
// for an existing service or destination, ESRCH for a missing service,
// ENOENT for a missing destination.
func kernelErr(err error) error {
	switch {
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

var protocols = map[model.Protocol]cipvs.Protocol{
	model.TCP:  cipvs.TCP,
	model.UDP:  cipvs.UDP,
	model.SCTP: cipvs.SCTP,
}

func family(k model.VirtualServiceKey) (cipvs.AddressFamily, netmask.Mask) {
	if k.Addr.Is4() {
		return cipvs.INET, netmask.MaskFrom(32, 32)
	}
	return cipvs.INET6, netmask.MaskFrom(128, 128)
}

// libKey is the identifying part of a service for cloudflare/ipvs.
func libKey(k model.VirtualServiceKey) cipvs.Service {
	fam, mask := family(k)
	if m, ok := MarkOf(k); ok {
		return cipvs.Service{FWMark: m, Family: fam, Netmask: mask}
	}
	return cipvs.Service{
		Address:  k.Addr,
		Port:     k.Port,
		Protocol: protocols[k.Protocol],
		Family:   fam,
		// The kernel requires a netmask (kernel-lab.md pitfall 13).
		Netmask: mask,
	}
}

func toLibService(s Service) cipvs.Service {
	ls := libKey(s.VirtualServiceKey)
	ls.Scheduler = s.Scheduler
	ls.Flags = cipvs.Flags(s.Flags)
	ls.Timeout = uint32(s.Persistence / time.Second)
	return ls
}

func fromLibService(ls cipvs.Service) (Service, bool) {
	var key model.VirtualServiceKey
	switch {
	case ls.FWMark != 0:
		key = MarkKey(ls.FWMark, ls.Family == cipvs.INET6)
	case !ls.Address.IsValid():
		return Service{}, false
	default:
		var proto model.Protocol
		for p, lp := range protocols {
			if lp == ls.Protocol {
				proto = p
			}
		}
		if proto == 0 {
			return Service{}, false
		}
		key = model.VirtualServiceKey{Addr: ls.Address.Unmap(), Port: ls.Port, Protocol: proto}
	}
	s := Service{
		VirtualServiceKey: key,
		Scheduler:         ls.Scheduler,
		Flags:             Flags(ls.Flags) & knownFlags,
	}
	if s.Flags&FlagPersistent != 0 {
		s.Persistence = time.Duration(ls.Timeout) * time.Second
	}
	return s, true
}

func toLibDestination(d Destination) cipvs.Destination {
	fam := cipvs.INET6
	if d.Addr.Is4() {
		fam = cipvs.INET
	}
	ld := cipvs.Destination{
		Address:   d.Addr,
		Port:      d.Port,
		Family:    fam,
		FwdMethod: cipvs.Masquerade,
		Weight:    d.Weight,
	}
	switch d.Tunnel.Encapsulation {
	case model.IPIP:
		ld.FwdMethod, ld.TunnelType = cipvs.Tunnel, cipvs.IPIP
	case model.GUE:
		ld.FwdMethod, ld.TunnelType, ld.TunnelPort = cipvs.Tunnel, cipvs.GUE, d.Tunnel.Port
	}
	return ld
}

// fromLibTunnel reads a destination's tunnel; zero for any other method,
// and for a tunnel type the dataplane does not program (GRE).
func fromLibTunnel(d cipvs.Destination) Tunnel {
	if d.FwdMethod != cipvs.Tunnel {
		return Tunnel{}
	}
	switch d.TunnelType {
	case cipvs.IPIP:
		return Tunnel{Encapsulation: model.IPIP}
	case cipvs.GUE:
		return Tunnel{Encapsulation: model.GUE, Port: d.TunnelPort}
	}
	return Tunnel{}
}

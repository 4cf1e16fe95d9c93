package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Errors the kernel interfaces (Kernel, Addresses, Sysctls) wrap, whatever
// the errno behind them (and ErrInterrupted, for their reads).
var (
	// ErrExists: the service or destination to add is already there.
	ErrExists = errors.New("already exists")
	// ErrNotFound: the service or destination to change or delete is not
	// there.
	ErrNotFound = errors.New("not found")
)

// Kernel is the IPVS table as the dataplane uses it. Implementations are
// safe for concurrent use.
type Kernel interface {
	// Services lists every virtual service, the dataplane's or not,
	// sorted by key. Like every read of the kernel interfaces, it may
	// fail with ErrInterrupted.
	Services() ([]Service, error)
	// Service reads the service of a key, ErrNotFound when there is none.
	// Unlike Services, a dump that another namespace's changes can make
	// leave out some of this namespace's services (see the package doc),
	// it is exact.
	Service(model.VirtualServiceKey) (Service, error)
	AddService(Service) error
	// UpdateService changes the scheduler, flags and persistence of an
	// existing service.
	UpdateService(Service) error
	// DeleteService removes a service and its destinations.
	DeleteService(model.VirtualServiceKey) error

	// Destinations lists a service's real servers, sorted by key. A
	// missing service has none: the kernel's dump does not tell the two
	// apart.
	Destinations(model.VirtualServiceKey) ([]DestinationState, error)
	AddDestination(model.VirtualServiceKey, Destination) error
	// UpdateDestination changes the weight and tunnel of an existing
	// destination.
	UpdateDestination(model.VirtualServiceKey, Destination) error
	DeleteDestination(model.VirtualServiceKey, DestinationKey) error

	// Timeouts reads the connection timeouts (ipvsadm -L --timeout).
	Timeouts() (Timeouts, error)
	// SetTimeouts changes them (ipvsadm --set): a zero field leaves the
	// kernel's value, as the kernel itself does.
	SetTimeouts(Timeouts) error
}

// Batcher is a Kernel that sends several changes per round trip with the
// kernel rather than one. Implementations are safe for concurrent use.
type Batcher interface {
	// Batch runs cmds in order and returns one error per command, nil
	// where it took effect. A failed command does not stop the ones after
	// it. Errors wrap ErrExists or ErrNotFound as the single calls' do; a
	// command whose outcome is unknown (its batch could not be sent whole,
	// or the kernel's answer was lost) has an error too, so that the
	// caller reads the kernel again.
	Batch(cmds []Command) []error
}

// CommandKind is what a Command changes.
type CommandKind uint8

// The commands: one per changing call of Kernel.
const (
	CmdAddService CommandKind = iota + 1
	CmdUpdateService
	CmdDeleteService
	CmdAddDestination
	CmdUpdateDestination
	CmdDeleteDestination
)

// Command is one change to the IPVS table, for Batcher. Service is the
// whole service for CmdAddService and CmdUpdateService, only its key
// otherwise; Dest is the destination of the destination commands (only its
// key for CmdDeleteDestination).
type Command struct {
	Kind    CommandKind
	Service Service
	Dest    Destination
}

// RunCommand runs c with k's single calls: what Batch does for one
// command.
func RunCommand(k Kernel, c Command) error {
	key := c.Service.VirtualServiceKey
	switch c.Kind {
	case CmdAddService:
		return k.AddService(c.Service)
	case CmdUpdateService:
		return k.UpdateService(c.Service)
	case CmdDeleteService:
		return k.DeleteService(key)
	case CmdAddDestination:
		return k.AddDestination(key, c.Dest)
	case CmdUpdateDestination:
		return k.UpdateDestination(key, c.Dest)
	case CmdDeleteDestination:
		return k.DeleteDestination(key, c.Dest.DestinationKey)
	}
	return fmt.Errorf("ipvs: unknown command %d", c.Kind)
}

// RunCommands runs cmds on k, in batches when k is a Batcher and with a
// call per command otherwise, and returns one error per command.
func RunCommands(k Kernel, cmds []Command) []error {
	if len(cmds) == 0 {
		return nil
	}
	if b, ok := k.(Batcher); ok {
		return b.Batch(cmds)
	}
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		errs[i] = RunCommand(k, c)
	}
	return errs
}

// Timeouts are IPVS's connection timeouts, for every virtual service:
// TCP for established TCP connections, TCPFin for TCP connections after a
// FIN, UDP for UDP flows. Whole seconds.
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// maxTimeout is the kernel's smallest limit: it rejects more than
// INT_MAX/HZ seconds with EINVAL, and HZ is at most 1000.
const maxTimeout = (1<<31 - 1) / 1000 * time.Second

// ValidateTimeouts checks that every timeout is whole seconds, not
// negative and within the kernel's limit.
func ValidateTimeouts(t Timeouts) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"tcp", t.TCP}, {"tcpfin", t.TCPFin}, {"udp", t.UDP}} {
		if f.d < 0 || f.d%time.Second != 0 || f.d > maxTimeout {
			return fmt.Errorf("%s timeout %s: want whole seconds from 0 to %s", f.name, f.d, maxTimeout)
		}
	}
	return nil
}

// Merge returns t with its zero fields taken from cur: the timeouts the
// kernel has after SetTimeouts(t).
func (t Timeouts) Merge(cur Timeouts) Timeouts {
	if t.TCP == 0 {
		t.TCP = cur.TCP
	}
	if t.TCPFin == 0 {
		t.TCPFin = cur.TCPFin
	}
	if t.UDP == 0 {
		t.UDP = cur.UDP
	}
	return t
}

// Flags are IPVS service flags the dataplane sets.
type Flags uint32

// The flags, with the kernel's values.
const (
	FlagPersistent Flags = 0x0001
	// FlagSchedOpt1..3 are scheduler-specific: sh-fallback, sh-port for
	// sh; mh-fallback, mh-port for mh.
	FlagSchedOpt1 Flags = 0x0008
	FlagSchedOpt2 Flags = 0x0010
	FlagSchedOpt3 Flags = 0x0020
)

// knownFlags are the flags a Service may carry; the kernel adds others
// (hashed) that are its own business.
const knownFlags = FlagPersistent | FlagSchedOpt1 | FlagSchedOpt2 | FlagSchedOpt3

// Service is one IPVS virtual service.
type Service struct {
	model.VirtualServiceKey
	Scheduler string
	Flags     Flags
	// Persistence is the affinity timeout when FlagPersistent is set,
	// whole seconds.
	Persistence time.Duration
}

// DestinationKey identifies a real server within a service.
type DestinationKey struct {
	Addr netip.Addr
	Port uint16
}

// Compare orders keys by address, then port.
func (k DestinationKey) Compare(o DestinationKey) int {
	if c := k.Addr.Compare(o.Addr); c != 0 {
		return c
	}
	return int(k.Port) - int(o.Port)
}

// Destination is a real server and its weight; weight 0 drains it.
type Destination struct {
	DestinationKey
	Weight uint32
	// Tunnel, when set, forwards to the real server encapsulated and
	// unchanged (IPVS's tunnel method); the zero Tunnel masquerades
	// (NAT), the method of every other destination.
	Tunnel Tunnel
}

// Tunnel is a destination's encapsulation: zero, or ipip, or GUE to Port.
type Tunnel struct {
	Encapsulation model.Encapsulation
	Port          uint16
}

// DestinationState is a destination with its connection counts, which
// graceful termination waits on, and its rates, which policies see.
type DestinationState struct {
	Destination
	ActiveConns   uint32
	InactiveConns uint32
	// ConnRate is new connections per second; BytesInRate and
	// BytesOutRate are bytes per second, as the kernel's estimator
	// smooths them (over about two seconds).
	ConnRate                  uint64
	BytesInRate, BytesOutRate uint64
}

// ValidateService checks what every Kernel rejects before it reaches the
// kernel, so that the fake and the kernel fail alike.
func ValidateService(s Service) error {
	if !s.Addr.IsValid() || s.Addr.Is4In6() {
		return fmt.Errorf("service address %v: want an IPv4 or IPv6 address", s.Addr)
	}
	if _, fwmark := MarkOf(s.VirtualServiceKey); !fwmark {
		switch s.Protocol {
		case model.TCP, model.UDP, model.SCTP:
		default:
			return fmt.Errorf("service %s: unsupported protocol %v", keyString(s.VirtualServiceKey), s.Protocol)
		}
		if s.Port == 0 {
			return fmt.Errorf("service %s: port 0", s.Addr)
		}
	}
	if s.Scheduler == "" {
		return fmt.Errorf("service %s: no scheduler", s.Addr)
	}
	if s.Flags&^knownFlags != 0 {
		return fmt.Errorf("service %s: unknown flags %#x", s.Addr, uint32(s.Flags&^knownFlags))
	}
	if s.Persistence%time.Second != 0 || s.Persistence < 0 {
		return fmt.Errorf("service %s: persistence %s is not whole seconds", s.Addr, s.Persistence)
	}
	if (s.Flags&FlagPersistent != 0) != (s.Persistence > 0) {
		return fmt.Errorf("service %s: persistence %s does not match flags %#x", s.Addr, s.Persistence, uint32(s.Flags))
	}
	return nil
}

// ValidateDestination checks a destination against the service it joins:
// the same address family, a port (a firewall-mark service's may have
// none), a known encapsulation.
func ValidateDestination(svc model.VirtualServiceKey, d Destination) error {
	if !d.Addr.IsValid() || d.Addr.Is4() != svc.Addr.Is4() {
		return fmt.Errorf("destination %v of %s: want an address of the service's family", d.Addr, svc.Addr)
	}
	if _, fwmark := MarkOf(svc); d.Port == 0 && !fwmark {
		// A firewall-mark service's real server may have none: it takes
		// each packet's own (the dsr side's tunnel real servers).
		return fmt.Errorf("destination %s of %s: port 0", d.Addr, svc.Addr)
	}
	switch d.Tunnel.Encapsulation {
	case 0, model.IPIP:
		if d.Tunnel.Port != 0 {
			return fmt.Errorf("destination %s of %s: a tunnel port without GUE", d.Addr, svc.Addr)
		}
	case model.GUE:
		if d.Tunnel.Port == 0 {
			return fmt.Errorf("destination %s of %s: GUE without a port", d.Addr, svc.Addr)
		}
	default:
		return fmt.Errorf("destination %s of %s: unknown encapsulation %v", d.Addr, svc.Addr, d.Tunnel.Encapsulation)
	}
	return nil
}

// SortServices sorts services by key.
func SortServices(ss []Service) {
	slices.SortFunc(ss, func(a, b Service) int { return a.VirtualServiceKey.Compare(b.VirtualServiceKey) })
}

// SortDestinations sorts destinations by key.
func SortDestinations(ds []DestinationState) {
	slices.SortFunc(ds, func(a, b DestinationState) int { return a.DestinationKey.Compare(b.DestinationKey) })
}

// keyString formats a key for errors: "TCP/10.96.0.10:80", or
// "FWM/4/12" for the IPv4 firewall-mark service of mark 12.
func keyString(k model.VirtualServiceKey) string {
	if m, ok := MarkOf(k); ok {
		fam := "4"
		if k.Addr.Is6() {
			fam = "6"
		}
		return fmt.Sprintf("FWM/%s/%d", fam, m)
	}
	return k.Protocol.String() + "/" + netip.AddrPortFrom(k.Addr, k.Port).String()
}

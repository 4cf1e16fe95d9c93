package ipvs

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
)

// DesiredService is a virtual service as the kernel should hold it.
type DesiredService struct {
	Service Service
	// Destinations are sorted by key.
	Destinations []Destination
	// Kind, Local and SourceRanges come from the plan, for the firewall;
	// Diff ignores them.
	Kind         model.FrontendKind
	Local        bool
	SourceRanges []netip.Prefix
	// For is set on a firewall-mark service (a MarkKey): the frontend
	// whose in-cluster traffic it serves (InternalFromModel).
	For model.VirtualServiceKey
}

// Desired is the state the dataplane wants in the kernel.
type Desired struct {
	Services map[model.VirtualServiceKey]DesiredService
	// Addrs must be bound to the dummy link.
	Addrs map[netip.Addr]bool
}

// Entry is a kernel virtual service with its destinations, sorted by key.
type Entry struct {
	Service      Service
	Destinations []DestinationState
}

// State is what the kernel holds, as far as the dataplane reads it.
type State struct {
	// Services are the kernel's virtual services, foreign ones included.
	Services map[model.VirtualServiceKey]Entry
	// Addrs are the addresses bound to the dummy link.
	Addrs map[netip.Addr]bool
	// Recorded are the services this Dataplane created or adopted, and
	// at the first load those the firewall table records as owned.
	Recorded map[model.VirtualServiceKey]bool
}

// Owns is the ownership rule: Switchyard owns a virtual service when its
// address is bound to the dummy link switchyard0 (only Switchyard binds
// addresses there, so after a restart its ClusterIP, LoadBalancer and
// external-IP services are recognised from the kernel alone), or when this
// Dataplane, or a previous one whose firewall table recorded it in its
// owned set, created or adopted it (NodePort services live on the node's
// own addresses, which other software may use too). A service on any other
// address is foreign: the dataplane never updates or deletes it unless the
// plan wants that very key, in which case it adopts it.
func (s State) Owns(k model.VirtualServiceKey) bool {
	return s.Addrs[k.Addr] || s.Recorded[k]
}

// Scope limits a Diff: everything, or the given keys and addresses (the
// before and after of the Services an incremental update changed).
type Scope struct {
	All   bool
	Keys  []model.VirtualServiceKey
	Addrs []netip.Addr
}

// OpKind is what an Op does.
type OpKind uint8

// Op kinds, in the order Diff emits them.
const (
	OpBindAddr OpKind = iota + 1
	OpAddService
	OpUpdateService
	OpAddDestination
	OpUpdateDestination
	// OpDrainDestination sets an unwanted destination's weight to 0 (when
	// it is not already) and queues it for deletion once its connections
	// end: graceful termination.
	OpDrainDestination
	OpDeleteService
	OpUnbindAddr
)

var opNames = map[OpKind]string{
	OpBindAddr: "bind", OpAddService: "add-service", OpUpdateService: "update-service",
	OpAddDestination: "add-dest", OpUpdateDestination: "update-dest", OpDrainDestination: "drain-dest",
	OpDeleteService: "delete-service", OpUnbindAddr: "unbind",
}

func (k OpKind) String() string {
	if s, ok := opNames[k]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one change to the kernel. Service is set for service and
// destination ops (only its key for deletes and destination ops), Dest for
// destination ops (with the current weight for drains), Addr for address
// ops.
type Op struct {
	Kind    OpKind
	Service Service
	Dest    Destination
	Addr    netip.Addr
}

func (o Op) String() string {
	switch o.Kind {
	case OpBindAddr, OpUnbindAddr:
		return o.Kind.String() + " " + o.Addr.String()
	case OpAddService, OpUpdateService, OpDeleteService:
		return o.Kind.String() + " " + keyString(o.Service.VirtualServiceKey)
	}
	return fmt.Sprintf("%s %s %s w%d", o.Kind, keyString(o.Service.VirtualServiceKey),
		netip.AddrPortFrom(o.Dest.Addr, o.Dest.Port), o.Dest.Weight)
}

// Diff returns the operations that take have to want within scope, in an
// order the kernel accepts: bind addresses, add or update services, add or
// update destinations, drain unwanted destinations, delete unwanted
// services, unbind unwanted addresses. want's and have's destinations
// must be sorted by key, as DesiredService and Entry hold them (FromModel
// and every read of the kernel sort them). It deletes and drains only what
// have.Owns; a destination that is already draining (weight 0 and not
// wanted) is drained again, which changes nothing in the kernel. It is
// pure.
func Diff(want Desired, have State, scope Scope) []Op {
	keys, addrs := scope.Keys, scope.Addrs
	if scope.All {
		keys = slices.Collect(maps.Keys(want.Services))
		for k := range have.Services {
			if have.Owns(k) {
				keys = append(keys, k)
			}
		}
		addrs = slices.Collect(maps.Keys(want.Addrs))
		addrs = slices.AppendSeq(addrs, maps.Keys(have.Addrs))
	}
	slices.SortFunc(keys, model.VirtualServiceKey.Compare)
	keys = slices.Compact(keys)
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)

	var binds, services, dests, drains, deletes, unbinds []Op
	for _, a := range addrs {
		switch {
		case want.Addrs[a] && !have.Addrs[a]:
			binds = append(binds, Op{Kind: OpBindAddr, Addr: a})
		case !want.Addrs[a] && have.Addrs[a]:
			unbinds = append(unbinds, Op{Kind: OpUnbindAddr, Addr: a})
		}
	}
	for _, k := range keys {
		w, wok := want.Services[k]
		h, hok := have.Services[k]
		switch {
		case !wok && !hok:
			continue
		case !wok:
			if have.Owns(k) {
				deletes = append(deletes, Op{Kind: OpDeleteService, Service: Service{VirtualServiceKey: k}})
			}
			continue
		case !hok:
			services = append(services, Op{Kind: OpAddService, Service: w.Service})
		case h.Service != w.Service:
			services = append(services, Op{Kind: OpUpdateService, Service: w.Service})
		}
		dests, drains = diffDestinations(Service{VirtualServiceKey: k}, w.Destinations, h.Destinations, dests, drains)
	}
	return slices.Concat(binds, services, dests, drains, deletes, unbinds)
}

// diffDestinations appends to dests the ops that add or update want's
// destinations of service key, in want's order, and to drains those that
// drain the ones of have that want lacks (never deleted at once), in
// have's order. Both are sorted by key (DesiredService, Entry): one walk
// of the two, with no map per service, which at 10,000 services was most
// of a full resync's garbage.
func diffDestinations(key Service, want []Destination, have []DestinationState, dests, drains []Op) ([]Op, []Op) {
	i, j := 0, 0
	for i < len(want) || j < len(have) {
		c := 0
		switch {
		case i == len(want):
			c = 1
		case j == len(have):
			c = -1
		default:
			c = want[i].DestinationKey.Compare(have[j].DestinationKey)
		}
		switch {
		case c < 0:
			dests = append(dests, Op{Kind: OpAddDestination, Service: key, Dest: want[i]})
			i++
		case c > 0:
			drains = append(drains, Op{Kind: OpDrainDestination, Service: key, Dest: have[j].Destination})
			j++
		default:
			if have[j].Destination != want[i] {
				dests = append(dests, Op{Kind: OpUpdateDestination, Service: key, Dest: want[i]})
			}
			i, j = i+1, j+1
		}
	}
	return dests, drains
}

// AddOnly returns the ops of ops that add or update and remove nothing:
// without deletions, unbinds, drains and updates of a real server to
// weight 0 (which drain it). It is pure; ops is left as it was.
func AddOnly(ops []Op) []Op {
	out := make([]Op, 0, len(ops))
	for _, op := range ops {
		switch op.Kind {
		case OpDeleteService, OpUnbindAddr, OpDrainDestination:
			continue
		case OpUpdateDestination:
			if op.Dest.Weight == 0 {
				continue
			}
		}
		out = append(out, op)
	}
	return out
}

// UDPFlushes returns, sorted, the UDP virtual services of scope that go
// from no serving real server (absent from have, or every destination at
// weight 0) to some (want has a destination above weight 0). A UDP client
// that sent to one meanwhile (before it was programmed, routed elsewhere)
// left a conntrack entry without NAT that its later datagrams keep
// matching while the entry lives, refreshed by each of them, so that NAT
// decided on a flow's first packet (masquerade) never applies to them
// (kube-proxy's k/k#19029): the dataplane deletes the service's entries
// once its real servers are in. It is pure.
func UDPFlushes(want Desired, have State, scope Scope) []model.VirtualServiceKey {
	keys := scope.Keys
	if scope.All {
		keys = slices.Collect(maps.Keys(want.Services))
	}
	var out []model.VirtualServiceKey
	for _, k := range keys {
		w, ok := want.Services[k]
		if !ok || k.Protocol != model.UDP || !slices.ContainsFunc(w.Destinations, func(d Destination) bool { return d.Weight > 0 }) {
			continue
		}
		if slices.ContainsFunc(have.Services[k].Destinations, func(d DestinationState) bool { return d.Weight > 0 }) {
			continue
		}
		out = append(out, k)
	}
	slices.SortFunc(out, model.VirtualServiceKey.Compare)
	return slices.Compact(out)
}

// FromModel converts a planned virtual service to its kernel form, with
// scheduler the default when the plan names none. Flags map by suffix:
// "*-fallback" or "flag-1", "*-port" or "flag-2", "flag-3"; an affinity
// timeout becomes persistence, rounded up to whole seconds.
func FromModel(vs model.VirtualService, scheduler string) (DesiredService, error) {
	s := Service{VirtualServiceKey: vs.VirtualServiceKey, Scheduler: vs.Scheduler}
	if s.Scheduler == "" {
		s.Scheduler = scheduler
	}
	for _, f := range vs.Flags {
		switch {
		case strings.HasSuffix(f, "-fallback") || f == "flag-1":
			s.Flags |= FlagSchedOpt1
		case strings.HasSuffix(f, "-port") || f == "flag-2":
			s.Flags |= FlagSchedOpt2
		case f == "flag-3":
			s.Flags |= FlagSchedOpt3
		default:
			return DesiredService{}, fmt.Errorf("virtual service %s: unknown scheduler flag %q", keyString(vs.VirtualServiceKey), f)
		}
	}
	if vs.AffinityTimeout > 0 {
		s.Flags |= FlagPersistent
		s.Persistence = (vs.AffinityTimeout + time.Second - 1).Truncate(time.Second)
	}
	if err := ValidateService(s); err != nil {
		return DesiredService{}, err
	}
	ds := DesiredService{Service: s, Destinations: make([]Destination, 0, len(vs.Destinations)), Kind: vs.Kind, Local: vs.Local, SourceRanges: slices.Clone(vs.SourceRanges)}
	for _, d := range vs.Destinations {
		dst := Destination{DestinationKey: DestinationKey{Addr: d.Addr, Port: d.Port}, Weight: d.Weight}
		if err := ValidateDestination(vs.VirtualServiceKey, dst); err != nil {
			return DesiredService{}, err
		}
		ds.Destinations = append(ds.Destinations, dst)
	}
	slices.SortFunc(ds.Destinations, func(a, b Destination) int { return a.DestinationKey.Compare(b.DestinationKey) })
	ds.Destinations = slices.CompactFunc(ds.Destinations, func(a, b Destination) bool { return a.DestinationKey == b.DestinationKey })
	return ds, nil
}

// BoundKind reports whether a frontend's address is bound to the dummy
// link: every kind but NodePort, whose addresses are the node's own.
func BoundKind(k model.FrontendKind) bool { return k != model.FrontendNodePort }

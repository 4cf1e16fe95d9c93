package plan

import (
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Planner keeps the whole plan of a node up to date from changes. It keeps
// each Service's last state and plan, so an Update costs in proportion to
// the Services it carries (or to the whole cluster only when the node's
// name, zone or addresses changed, or the options did). It is not
// goroutine-safe: the one reconcile loop owns it.
//
// It arbitrates the virtual services several Services ask for (see
// Arbitrate): when the holder of a key changes, the plans of the Services
// that lost or won it are among the changed keys too.
type Planner struct {
	opts   Options
	node   *model.Node // the relevant fields of the last known node; nil while unknown
	env    env
	inputs map[model.ServiceKey]model.ServiceState
	// own are the Services' plans before arbitration; plan holds them
	// arbitrated (the same pointer when a Service lost nothing).
	own    map[model.ServiceKey]*model.ServicePlan
	claims claims
	plan   model.Plan
	dirty  []model.ServiceKey // scratch: the Services to arbitrate again
}

// New returns a Planner with an empty plan.
func New(opts Options) *Planner {
	p := &Planner{
		opts:   opts.normalized(),
		inputs: make(map[model.ServiceKey]model.ServiceState),
		own:    make(map[model.ServiceKey]*model.ServicePlan),
		claims: newClaims(),
		plan:   model.Plan{Services: make(map[model.ServiceKey]*model.ServicePlan)},
	}
	p.env = newEnv(nil, &p.opts)
	return p
}

// Update records the changed Services' states and the local node, replans
// only what the change can affect (everything when the node's name, zone
// or addresses changed) and returns the keys whose ServicePlan changed
// (added, updated or removed), sorted. A state with a nil Service removes
// the Service.
//
// node nil means the node is not known: before the node was ever seen the
// plan has no local endpoints and no NodePorts; once it was seen, nil keeps
// the last known node, so a missed or deleted Node object never flushes
// NodePorts.
//
// The Planner keeps the states it is given (not copies): callers must not
// modify them afterwards.
func (p *Planner) Update(node *model.Node, services map[model.ServiceKey]model.ServiceState) []model.ServiceKey {
	if len(p.inputs) == 0 && len(p.plan.Services) == 0 && len(services) > 0 {
		// The first sync: size the maps once instead of growing them.
		p.inputs = make(map[model.ServiceKey]model.ServiceState, len(services))
		p.own = make(map[model.ServiceKey]*model.ServicePlan, len(services))
		p.plan.Services = make(map[model.ServiceKey]*model.ServicePlan, len(services))
	}
	if node != nil && !sameNode(p.node, node) {
		p.node = &model.Node{Name: node.Name, Zone: node.Zone, Addresses: sortedAddrs(node.Addresses),
			StatusAddresses: slices.Clone(node.StatusAddresses)}
		p.env = newEnv(p.node, &p.opts)
		for k, st := range services {
			p.record(k, st)
		}
		return p.replanAll()
	}
	p.dirty = p.dirty[:0]
	for k, st := range services {
		p.record(k, st)
		p.replan(k, st)
	}
	return p.publish()
}

// SetOptions replans everything with new options and returns the keys
// whose plan changed, sorted. Equal options change nothing.
func (p *Planner) SetOptions(opts Options) []model.ServiceKey {
	n := opts.normalized()
	if n.equal(&p.opts) {
		return nil
	}
	p.opts = n
	p.env = newEnv(p.node, &p.opts)
	return p.replanAll()
}

// Plan returns the current plan, read-only for callers. Its map follows
// every Update and SetOptions; the ServicePlans in it are replaced, never
// modified, so a ServicePlan read earlier stays as it was.
func (p *Planner) Plan() *model.Plan { return &p.plan }

func (p *Planner) record(k model.ServiceKey, st model.ServiceState) {
	if st.Service == nil {
		delete(p.inputs, k)
		return
	}
	p.inputs[k] = st
}

// replan plans one Service from its state (a nil Service removes it)
// and, when its own plan changed, queues it and the Services whose
// contests it changed for publish.
func (p *Planner) replan(k model.ServiceKey, st model.ServiceState) {
	old, had := p.own[k]
	if st.Service == nil {
		if had {
			delete(p.own, k)
			p.dirty = p.claims.move(k, old, nil, append(p.dirty, k))
		}
		return
	}
	sp := p.env.planService(st.Service, st.Endpoints)
	if had && old.Equal(sp) {
		return
	}
	p.own[k] = sp
	p.dirty = p.claims.move(k, old, sp, append(p.dirty, k))
}

// replanAll replans every recorded Service, drops the plans of Services no
// longer recorded and returns the changed keys, sorted.
func (p *Planner) replanAll() []model.ServiceKey {
	p.dirty = p.dirty[:0]
	for k, sp := range p.own {
		if _, ok := p.inputs[k]; !ok {
			delete(p.own, k)
			p.dirty = p.claims.move(k, sp, nil, append(p.dirty, k))
		}
	}
	for k, st := range p.inputs {
		p.replan(k, st)
	}
	return p.publish()
}

// publish arbitrates the queued Services' plans into the plan and returns
// the keys whose published plan changed, sorted.
func (p *Planner) publish() []model.ServiceKey {
	slices.SortFunc(p.dirty, model.ServiceKey.Compare)
	var changed []model.ServiceKey
	for _, k := range slices.Compact(p.dirty) {
		old, had := p.plan.Services[k]
		own, ok := p.own[k]
		if !ok {
			if had {
				delete(p.plan.Services, k)
				changed = append(changed, k)
			}
			continue
		}
		sp := arbitrated(k, own, p.claims.owner)
		if had && old.Equal(sp) {
			continue
		}
		p.plan.Services[k] = sp
		changed = append(changed, k)
	}
	return changed
}

// sameNode reports whether two nodes plan alike: same name, zone, primary
// IPs and addresses in any order (a is the stored node, its addresses
// sorted).
// Readiness and labels do not enter the plan.
func sameNode(a, b *model.Node) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Name != b.Name || a.Zone != b.Zone || primaryIPs(a) != primaryIPs(b) {
		return false
	}
	if slices.IsSortedFunc(b.Addresses, netip.Addr.Compare) {
		return slices.Equal(a.Addresses, b.Addresses)
	}
	return slices.Equal(a.Addresses, sortedAddrs(b.Addresses))
}

// sortedAddrs returns a sorted copy of addrs, so that a node reporting its
// addresses in another order is the same node.
func sortedAddrs(addrs []netip.Addr) []netip.Addr {
	s := slices.Clone(addrs)
	slices.SortFunc(s, netip.Addr.Compare)
	return s
}

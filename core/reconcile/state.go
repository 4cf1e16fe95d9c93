package reconcile

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/policystage"
)

// State is the loop's view for /debug/state: what the plan wants and what
// the dataplane last applied successfully. It marshals to JSON.
type State struct {
	Node string `json:"node"`
	// Synced is false until the Source has synced and a Sync ran.
	Synced    bool      `json:"synced"`
	LastSync  time.Time `json:"lastSync,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	// Desired and Applied are sorted by Service.
	Desired []ServiceState `json:"desired"`
	Applied []ServiceState `json:"applied"`
	// Announced is what each announcer last accepted, by announcer name.
	Announced map[string][]AnnouncementState `json:"announced"`
	// Policies is each evaluated Service's policy and whether it works,
	// sorted by Service; empty without a policy stage.
	Policies []policystage.Status `json:"policies,omitempty"`
	// DSR is the dsr side as last applied (tables, slots, this node's
	// role per address); nil while this node applied none.
	DSR *DSRState `json:"dsr,omitempty"`
}

// AnnouncementState is one announced address.
type AnnouncementState struct {
	Address netip.Addr `json:"address"`
	Service string     `json:"service"`
}

// ServiceState is one Service's plan.
type ServiceState struct {
	Service             string                `json:"service"` // namespace/name
	Rejected            string                `json:"rejected,omitempty"`
	VirtualServices     []VirtualServiceState `json:"virtualServices,omitempty"`
	Announce            []netip.Addr          `json:"announce,omitempty"`
	HealthCheckNodePort uint16                `json:"healthCheckNodePort,omitempty"`
	LocalEndpoints      int                   `json:"localEndpoints,omitempty"`
	// Contested are the virtual services the Service asks for that
	// another Service holds (the planner gives each to one Service).
	Contested []ContestState `json:"contested,omitempty"`
}

// ContestState is a virtual service a Service asks for and Owner holds.
type ContestState struct {
	Protocol string         `json:"protocol"`
	Address  netip.AddrPort `json:"address"`
	Owner    string         `json:"owner"` // namespace/name
}

// VirtualServiceState is one virtual service of a plan.
type VirtualServiceState struct {
	Protocol        string             `json:"protocol"`
	Address         netip.AddrPort     `json:"address"`
	Kind            string             `json:"kind"`
	PortName        string             `json:"portName,omitempty"`
	Scheduler       string             `json:"scheduler"`
	Flags           []string           `json:"flags,omitempty"`
	AffinitySeconds int64              `json:"affinitySeconds,omitempty"`
	Local           bool               `json:"local,omitempty"`
	SourceRanges    []netip.Prefix     `json:"sourceRanges,omitempty"`
	Destinations    []DestinationState `json:"destinations"`
}

// DestinationState is one real server.
type DestinationState struct {
	Address netip.AddrPort `json:"address"`
	Weight  uint32         `json:"weight"`
}

// State returns the desired and applied state. Plans are immutable once
// planned, so it copies only the maps under the lock.
func (l *Loop) State() State {
	l.mu.Lock()
	desired, applied := maps.Clone(l.desired), maps.Clone(l.applied)
	st := State{Node: l.cfg.NodeName, Synced: l.synced, LastSync: l.lastSuccess}
	if l.lastErr != nil {
		st.LastError = l.lastErr.Error()
	}
	st.Announced = make(map[string][]AnnouncementState, len(l.announced))
	for name, set := range l.announced {
		list := make([]AnnouncementState, 0, len(set))
		for _, a := range set {
			list = append(list, AnnouncementState{Address: a.Addr, Service: a.Service.String()})
		}
		st.Announced[name] = list
	}
	policies := l.policyView
	st.DSR = l.dsrView // replaced, never modified, by Sync
	l.mu.Unlock()
	st.Policies = policies // replaced, never modified, by Sync
	st.Desired = view(desired)
	st.Applied = view(applied)
	return st
}

func view(plans map[model.ServiceKey]*model.ServicePlan) []ServiceState {
	out := make([]ServiceState, 0, len(plans))
	for _, k := range slices.SortedFunc(maps.Keys(plans), model.ServiceKey.Compare) {
		sp := plans[k]
		s := ServiceState{
			Service:             k.String(),
			Rejected:            sp.Rejected,
			Announce:            slices.Clone(sp.Announce),
			HealthCheckNodePort: sp.HealthCheckNodePort,
			LocalEndpoints:      sp.LocalEndpoints,
		}
		for _, vs := range sp.VirtualServices {
			v := VirtualServiceState{
				Protocol:        vs.Protocol.String(),
				Address:         netip.AddrPortFrom(vs.Addr, vs.Port),
				Kind:            vs.Kind.String(),
				PortName:        vs.PortName,
				Scheduler:       vs.Scheduler,
				Flags:           slices.Clone(vs.Flags),
				AffinitySeconds: int64(vs.AffinityTimeout / time.Second),
				Local:           vs.Local,
				SourceRanges:    slices.Clone(vs.SourceRanges),
				Destinations:    make([]DestinationState, 0, len(vs.Destinations)),
			}
			for _, d := range vs.Destinations {
				v.Destinations = append(v.Destinations, DestinationState{Address: netip.AddrPortFrom(d.Addr, d.Port), Weight: d.Weight})
			}
			s.VirtualServices = append(s.VirtualServices, v)
		}
		for _, c := range sp.Contested {
			s.Contested = append(s.Contested, ContestState{Protocol: c.Protocol.String(), Address: netip.AddrPortFrom(c.Addr, c.Port), Owner: c.Owner.String()})
		}
		out = append(out, s)
	}
	return out
}

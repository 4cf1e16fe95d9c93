package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/switchyard-lb/switchyard/core/model"
)

var (
	familyIPv4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyIPv6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// desired turns an announcement set into the addresses to advertise.
// Duplicates (one address shared by several Services) collapse; invalid
// addresses are reported and left out.
func desired(set []model.Announcement) (map[netip.Addr]struct{}, error) {
	want := make(map[netip.Addr]struct{}, len(set))
	var errs []error
	for _, a := range set {
		addr := a.Addr.Unmap()
		if !addr.IsValid() || addr.Zone() != "" || addr.IsUnspecified() {
			errs = append(errs, fmt.Errorf("service %v: cannot announce address %q", a.Service, a.Addr))
			continue
		}
		want[addr] = struct{}{}
	}
	return want, errors.Join(errs...)
}

// diff returns, sorted, the addresses in want but not in sent, and those in
// sent but not in want.
func diff(sent, want map[netip.Addr]struct{}) (add, del []netip.Addr) {
	for a := range want {
		if _, ok := sent[a]; !ok {
			add = append(add, a)
		}
	}
	for a := range sent {
		if _, ok := want[a]; !ok {
			del = append(del, a)
		}
	}
	slices.SortFunc(add, netip.Addr.Compare)
	slices.SortFunc(del, netip.Addr.Compare)
	return add, del
}

// hostPath builds the GoBGP path for addr's host route. nextHop may be
// invalid: GoBGP then uses the local address of each session.
func hostPath(addr, nextHop netip.Addr) (*api.Path, error) {
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: addr.String(), PrefixLen: uint32(addr.BitLen())})
	if err != nil {
		return nil, fmt.Errorf("encoding prefix %s: %w", addr, err)
	}
	origin, err := anypb.New(&api.OriginAttribute{Origin: 0}) // IGP
	if err != nil {
		return nil, fmt.Errorf("encoding origin: %w", err)
	}
	var nh *anypb.Any
	family := familyIPv4
	if addr.Is4() {
		hop := "0.0.0.0"
		if nextHop.IsValid() {
			hop = nextHop.String()
		}
		nh, err = anypb.New(&api.NextHopAttribute{NextHop: hop})
	} else {
		family = familyIPv6
		hop := "::"
		if nextHop.IsValid() {
			hop = nextHop.String()
		}
		nh, err = anypb.New(&api.MpReachNLRIAttribute{Family: familyIPv6, NextHops: []string{hop}, Nlris: []*anypb.Any{nlri}})
	}
	if err != nil {
		return nil, fmt.Errorf("encoding next hop for %s: %w", addr, err)
	}
	return &api.Path{Family: family, Nlri: nlri, Pattrs: []*anypb.Any{origin, nh}}, nil
}

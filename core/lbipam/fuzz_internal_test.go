package lbipam

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/ipam"
)

// FuzzRequestFor feeds arbitrary requested addresses (spec.loadBalancerIP
// and the switchyard.dev/load-balancer-ips annotation), pool and sharing
// annotations, published ingress IPs and ports to RequestFor, then the
// request to an allocator with two pools. Neither may panic; a request
// with an address that does not parse is refused with
// ipam.ErrInvalidRequest; otherwise every requested address is in the
// request once, valid and zoneless, and whatever the allocator gives is
// a requested address when there are any, and from a pool.
func FuzzRequestFor(f *testing.F) {
	f.Add("192.0.2.10", "192.0.2.11, 2001:db8::5", "blue", "key", "192.0.2.10", int32(443), "TCP")
	f.Add("", ",, ,", "", "", "", int32(0), "")
	f.Add("fe80::1%eth0", "::ffff:192.0.2.1", " red ", " ", "not-an-ip", int32(70000), "SCTP")
	f.Add("192.0.2.300", "192.0.2.1,192.0.2.1", "red", "", "2001:db8::1", int32(53), "UDP")
	alloc, err := ipam.New([]ipam.Pool{
		{Name: "blue", Addresses: []string{"192.0.2.0/28", "2001:db8::/124"}, AutoAssign: true},
		{Name: "red", Addresses: []string{"198.51.100.1-198.51.100.9"}},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, lbIP, ann, pool, sharing, ingress string, port int32, proto string) {
		svc := lbService(func(s *corev1.Service) {
			s.Spec.LoadBalancerIP = lbIP
			s.Annotations = map[string]string{AnnotationLoadBalancerIPs: ann, AnnotationAddressPool: pool, AnnotationAllowSharedIP: sharing}
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: port, Protocol: corev1.Protocol(proto)})
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ingress}, {IP: ingress}}
		})
		r, err := RequestFor(svc, nil)
		tokens := append(strings.Split(ann, ","), lbIP)
		var want []netip.Addr
		bad := false
		for _, s := range tokens {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			a, perr := netip.ParseAddr(s)
			if perr != nil || a.Zone() != "" || a.Is4In6() {
				bad = true
				continue
			}
			if !slices.Contains(want, a) {
				want = append(want, a)
			}
		}
		if bad {
			if !errors.Is(err, ipam.ErrInvalidRequest) {
				t.Fatalf("RequestFor(loadBalancerIP %q, annotation %q) = %v, want ipam.ErrInvalidRequest", lbIP, ann, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("RequestFor(loadBalancerIP %q, annotation %q): %v", lbIP, ann, err)
		}
		slices.SortFunc(want, netip.Addr.Compare)
		got := slices.Clone(r.RequestedIPs)
		slices.SortFunc(got, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			t.Fatalf("requested IPs %v from loadBalancerIP %q and annotation %q, want %v", r.RequestedIPs, lbIP, ann, want)
		}
		if r.Pool != strings.TrimSpace(pool) || r.SharingKey != strings.TrimSpace(sharing) {
			t.Fatalf("pool %q and sharing key %q from %q and %q, want them trimmed", r.Pool, r.SharingKey, pool, sharing)
		}
		ips, err := alloc.Allocate(r)
		defer alloc.Release(r.Key)
		if err != nil {
			return
		}
		for _, ip := range ips {
			if len(want) > 0 && !slices.Contains(want, ip) {
				t.Fatalf("allocated %v for requested %v", ips, want)
			}
			if !netip.MustParsePrefix("192.0.2.0/28").Contains(ip) && !netip.MustParsePrefix("2001:db8::/124").Contains(ip) &&
				(ip.Compare(netip.MustParseAddr("198.51.100.1")) < 0 || ip.Compare(netip.MustParseAddr("198.51.100.9")) > 0) {
				t.Fatalf("allocated %s, in no pool", ip)
			}
		}
	})
}

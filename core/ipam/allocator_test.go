package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-lb/switchyard/core/model"
)

func key(name string) model.ServiceKey { return model.ServiceKey{Namespace: "default", Name: name} }

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

var (
	tcp80  = Port{80, model.TCP}
	udp80  = Port{80, model.UDP}
	tcp443 = Port{443, model.TCP}
)

// step is one operation of a scenario and what it must return.
type step struct {
	alloc   *Request
	release string // Service name to release
	sync    []Request
	pools   []Pool // SetPools

	want    []string // addresses returned (Allocate), or lost keys (SetPools)
	wantErr error
	// wantSync are "name=addr,addr" or "name!" (error) per result.
	wantSync []string
	// wantStats, when set, are the pools' "name total/used".
	wantStats []string
}

func run(t *testing.T, pools []Pool, steps []step) {
	t.Helper()
	a, err := New(pools)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for i, s := range steps {
		var got []string
		var err error
		switch {
		case s.alloc != nil:
			var ips []netip.Addr
			ips, err = a.Allocate(*s.alloc)
			for _, ip := range ips {
				got = append(got, ip.String())
			}
			if diff := cmp.Diff(ips, a.Assigned(s.alloc.Key), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("step %d: Assigned differs from what Allocate returned (-returned +assigned):\n%s", i, diff)
			}
		case s.release != "":
			a.Release(key(s.release))
			got = nil
			for _, ip := range a.Assigned(key(s.release)) {
				got = append(got, ip.String())
			}
		case s.sync != nil:
			for _, r := range a.Sync(s.sync) {
				e := r.Key.Name + "="
				for i, ip := range r.IPs {
					if i > 0 {
						e += ","
					}
					e += ip.String()
				}
				if r.Err != nil {
					e = r.Key.Name + "!" + strings.TrimPrefix(e, r.Key.Name+"=")
				}
				got = append(got, e)
			}
			if diff := cmp.Diff(s.wantSync, got); diff != "" {
				t.Errorf("step %d: Sync (-want +got):\n%s", i, diff)
			}
			got = nil
		case s.pools != nil:
			var lost []model.ServiceKey
			lost, err = a.SetPools(s.pools)
			for _, k := range lost {
				got = append(got, k.Name)
			}
		}
		if (err != nil) != (s.wantErr != nil) || (s.wantErr != errAny && !errors.Is(err, s.wantErr)) {
			t.Errorf("step %d: error %v, want %v", i, err, s.wantErr)
		}
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("step %d: (-want +got):\n%s", i, diff)
		}
		if s.wantStats != nil {
			var st []string
			for _, ps := range a.Stats() {
				st = append(st, ps.Pool+" "+itoa(ps.Total)+"/"+itoa(uint64(ps.Used)))
			}
			if diff := cmp.Diff(s.wantStats, st); diff != "" {
				t.Errorf("step %d: Stats (-want +got):\n%s", i, diff)
			}
		}
	}
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func req(name string, mods ...func(*Request)) *Request {
	r := &Request{Key: key(name), Ports: []Port{tcp80}}
	for _, m := range mods {
		m(r)
	}
	return r
}

func ports(ps ...Port) func(*Request) { return func(r *Request) { r.Ports = ps } }
func share(k string) func(*Request)   { return func(r *Request) { r.SharingKey = k } }
func backend(k string) func(*Request) { return func(r *Request) { r.BackendKey = k } }
func want(ss ...string) func(*Request) {
	return func(r *Request) { r.RequestedIPs = addrs(ss...) }
}
func current(ss ...string) func(*Request) { return func(r *Request) { r.Current = addrs(ss...) } }
func inPool(p string) func(*Request)      { return func(r *Request) { r.Pool = p } }
func families(fs ...Family) func(*Request) {
	return func(r *Request) { r.Families = fs }
}
func prefer(r *Request) { r.PreferDualStack = true }
func ns(n string, labels map[string]string) func(*Request) {
	return func(r *Request) { r.Key.Namespace, r.NamespaceLabels = n, labels }
}
func labels(l map[string]string) func(*Request) { return func(r *Request) { r.Labels = l } }

func TestAllocator(t *testing.T) {
	small := []Pool{{Name: "small", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true}}
	dual := []Pool{{Name: "dual", Addresses: []string{"10.0.0.0/30", "2001:db8::/126"}, AutoAssign: true}}
	tests := []struct {
		name  string
		pools []Pool
		steps []step
	}{
		{
			name:  "lowest free address, exhaustion, reuse after release",
			pools: small,
			steps: []step{
				{alloc: req("a"), want: []string{"10.0.0.0"}},
				{alloc: req("b"), want: []string{"10.0.0.1"}},
				{alloc: req("c"), want: []string{"10.0.0.2"}},
				{alloc: req("d"), want: []string{"10.0.0.3"}, wantStats: []string{"small 4/4"}},
				{alloc: req("e"), wantErr: ErrPoolExhausted},
				{release: "b"},
				{alloc: req("e"), want: []string{"10.0.0.1"}, wantStats: []string{"small 4/4"}},
				{alloc: req("a"), want: []string{"10.0.0.0"}}, // idempotent
				{release: "a", wantStats: []string{"small 4/3"}},
			},
		},
		{
			name:  "avoid buggy addresses",
			pools: []Pool{{Name: "p", Addresses: []string{"10.0.0.254-10.0.1.1"}, AutoAssign: true, AvoidBuggyIPs: true}},
			steps: []step{
				{alloc: req("a"), want: []string{"10.0.0.254"}},
				{alloc: req("b"), want: []string{"10.0.1.1"}},
				{alloc: req("c"), wantErr: ErrPoolExhausted, wantStats: []string{"p 2/2"}},
				{alloc: req("d", want("10.0.0.255")), wantErr: ErrNoPool},
			},
		},
		{
			name:  "requested addresses",
			pools: []Pool{{Name: "p", Addresses: []string{"10.0.0.0/24"}, AutoAssign: true}},
			steps: []step{
				{alloc: req("a", want("10.0.0.7")), want: []string{"10.0.0.7"}},
				{alloc: req("b", want("10.0.1.7")), wantErr: ErrNoPool},
				{alloc: req("c", want("10.0.0.7")), wantErr: ErrConflict},
				{alloc: req("d"), want: []string{"10.0.0.0"}},
				// a changes its request: the old address is released.
				{alloc: req("a", want("10.0.0.9")), want: []string{"10.0.0.9"}},
				{alloc: req("c", want("10.0.0.7")), want: []string{"10.0.0.7"}},
				// a asks for a taken address: it loses its own, which is
				// not what it requests any more.
				{alloc: req("a", want("10.0.0.0")), wantErr: ErrConflict},
				{alloc: req("e"), want: []string{"10.0.0.1"}},
			},
		},
		{
			name: "failed request keeps the still valid address",
			pools: []Pool{
				{Name: "v4", Addresses: []string{"10.0.0.0/31"}, AutoAssign: true},
				{Name: "v6", Addresses: []string{"2001:db8::/128"}, AutoAssign: true},
			},
			steps: []step{
				{alloc: req("x", families(IPv6)), want: []string{"2001:db8::"}},
				{alloc: req("a"), want: []string{"10.0.0.0"}},
				// a becomes dual-stack but no IPv6 address is free: it
				// keeps its IPv4 address and gets nothing new.
				{alloc: req("a", families(IPv4, IPv6)), want: []string{"10.0.0.0"}, wantErr: ErrPoolExhausted},
				{release: "x"},
				{alloc: req("a", families(IPv4, IPv6)), want: []string{"10.0.0.0", "2001:db8::"}},
			},
		},
		{
			name: "auto-assign, pool annotation and manual pools",
			pools: []Pool{
				{Name: "manual", Addresses: []string{"192.0.2.0/30"}},
				{Name: "auto", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true},
				{Name: "auto2", Addresses: []string{"10.0.1.0/30"}, AutoAssign: true},
			},
			steps: []step{
				{alloc: req("a"), want: []string{"10.0.0.0"}},
				{alloc: req("b", inPool("manual")), want: []string{"192.0.2.0"}},
				{alloc: req("c", want("192.0.2.3")), want: []string{"192.0.2.3"}},
				{alloc: req("d", inPool("auto2")), want: []string{"10.0.1.0"}},
				{alloc: req("e", inPool("nope")), wantErr: ErrNoPool},
				{alloc: req("f", inPool("auto"), want("192.0.2.2")), wantErr: ErrNoPool},
				// b moves to another pool: renumbered from it.
				{alloc: req("b", inPool("auto")), want: []string{"10.0.0.1"}},
				// b drops the annotation: it keeps its address.
				{alloc: req("b"), want: []string{"10.0.0.1"}},
				// A published address in a manual pool is kept too.
				{alloc: req("g", current("192.0.2.1")), want: []string{"192.0.2.1"}},
			},
		},
		{
			name:  "sharing key, backend key and ports",
			pools: small,
			steps: []step{
				{alloc: req("a", share("k"), ports(tcp80)), want: []string{"10.0.0.0"}},
				{alloc: req("b", share("k"), ports(udp80)), want: []string{"10.0.0.0"}},
				{alloc: req("c", share("k"), ports(tcp80, tcp443)), want: []string{"10.0.0.1"}},
				{alloc: req("d", share("k"), ports(tcp443)), want: []string{"10.0.0.0"}},
				{alloc: req("e", share("other"), ports(Port{53, model.UDP})), want: []string{"10.0.0.2"}},
				{alloc: req("f", ports(Port{8080, model.TCP})), want: []string{"10.0.0.3"}},
				{alloc: req("g", share("k"), ports(tcp80), want("10.0.0.0")), wantErr: ErrConflict},
				{alloc: req("g", share("k"), ports(Port{22, model.TCP}), backend("x"), want("10.0.0.0")), wantErr: ErrConflict},
				{alloc: req("g", ports(Port{22, model.TCP}), want("10.0.0.0")), wantErr: ErrConflict},
				{alloc: req("g", share("k"), ports(Port{22, model.TCP}), want("10.0.0.0")), want: []string{"10.0.0.0"}},
				{release: "a", wantStats: []string{"small 4/4"}},
				{release: "b"}, {release: "d"}, {release: "g", wantStats: []string{"small 4/3"}},
			},
		},
		{
			name:  "a sharer whose ports start to clash is renumbered, the other stays",
			pools: small,
			steps: []step{
				{alloc: req("a", share("k"), ports(tcp80)), want: []string{"10.0.0.0"}},
				{alloc: req("b", share("k"), ports(udp80)), want: []string{"10.0.0.0"}},
				{alloc: req("b", share("k"), ports(tcp80)), want: []string{"10.0.0.1"}},
				{alloc: req("a", share("k"), ports(tcp80)), want: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "dual-stack",
			pools: dual,
			steps: []step{
				{alloc: req("a", families(IPv4, IPv6)), want: []string{"10.0.0.0", "2001:db8::"}},
				{alloc: req("b", families(IPv6, IPv4)), want: []string{"2001:db8::1", "10.0.0.1"}},
				{alloc: req("c", families(IPv6)), want: []string{"2001:db8::2"}},
				{alloc: req("d", want("10.0.0.3", "2001:db8::3"), families(IPv4, IPv6)), want: []string{"10.0.0.3", "2001:db8::3"}},
				{alloc: req("e", want("2001:db8::3", "10.0.0.2")), wantErr: ErrConflict},
				// Only one IPv4 left, no IPv6: require fails, prefer gets one.
				{alloc: req("e", families(IPv4, IPv6)), wantErr: ErrPoolExhausted},
				{alloc: req("e", families(IPv6, IPv4), prefer), want: []string{"10.0.0.2"}},
				{alloc: req("f", families(IPv4, IPv6), prefer), wantErr: ErrPoolExhausted},
				{alloc: req("a"), want: []string{"10.0.0.0"}}, // back to single-stack: keeps IPv4
				{alloc: req("a", families(IPv6)), want: []string{"2001:db8::"}},
			},
		},
		{
			name: "dual-stack across two single-family pools",
			pools: []Pool{
				{Name: "v4", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true},
				{Name: "v6", Addresses: []string{"2001:db8::/126"}, AutoAssign: true},
			},
			steps: []step{
				{alloc: req("a", families(IPv4, IPv6)), want: []string{"10.0.0.0", "2001:db8::"}},
				{alloc: req("b", families(IPv6, IPv4), inPool("v6")), wantErr: ErrNoPool},
				{alloc: req("b", families(IPv6, IPv4), inPool("v6"), prefer), want: []string{"2001:db8::1"}},
			},
		},
		{
			name:  "dual-stack without any IPv6 pool",
			pools: small,
			steps: []step{
				{alloc: req("a", families(IPv4, IPv6)), wantErr: ErrNoPool},
				{alloc: req("a", families(IPv6)), wantErr: ErrNoPool},
				{alloc: req("a", families(IPv6, IPv4), prefer), want: []string{"10.0.0.0"}},
			},
		},
		{
			name:  "invalid requests",
			pools: dual,
			steps: []step{
				{alloc: req("a", want("10.0.0.1", "10.0.0.2")), wantErr: ErrInvalidRequest},
				{alloc: req("a", want("2001:db8::1"), families(IPv4)), wantErr: ErrInvalidRequest},
				{alloc: req("a", want("10.0.0.1"), families(IPv4, IPv6)), wantErr: ErrInvalidRequest},
				{alloc: req("a", families(IPv4, IPv4)), wantErr: ErrInvalidRequest},
				{alloc: req("a", families(IPv4, IPv6, IPv4)), wantErr: ErrInvalidRequest},
				{alloc: req("a", want("::ffff:10.0.0.1")), wantErr: ErrInvalidRequest},
				{alloc: req("a", want("10.0.0.1"), families(IPv4, IPv6), prefer), want: []string{"10.0.0.1"}},
				// An invalid request releases what the Service held.
				{alloc: req("a", want("10.0.0.1", "10.0.0.2")), wantErr: ErrInvalidRequest, wantStats: []string{"dual 8/0"}},
			},
		},
		{
			name:  "an existing assignment is kept",
			pools: small,
			steps: []step{
				{alloc: req("a", current("10.0.0.2")), want: []string{"10.0.0.2"}},
				{alloc: req("b", current("10.0.0.2")), want: []string{"10.0.0.0"}},  // taken: not valid for b
				{alloc: req("c", current("192.0.2.1")), want: []string{"10.0.0.1"}}, // outside every pool
				{alloc: req("a", ports(tcp443)), want: []string{"10.0.0.2"}},
				// The allocator's own record beats a stale Current.
				{alloc: req("a", current("10.0.0.3")), want: []string{"10.0.0.2"}},
			},
		},
		{
			name: "namespace and Service selectors",
			pools: []Pool{
				{Name: "prod", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true, Namespaces: []string{"prod"}},
				{Name: "gold", Addresses: []string{"10.0.1.0/30"}, AutoAssign: true,
					NamespaceSelectors: []Selector{{MatchLabels: map[string]string{"tier": "gold"}}}},
				{Name: "web", Addresses: []string{"10.0.2.0/30"}, AutoAssign: true,
					ServiceSelectors: []Selector{{MatchLabels: map[string]string{"app": "web"}}}},
			},
			steps: []step{
				{alloc: req("a", ns("prod", nil)), want: []string{"10.0.0.0"}},
				{alloc: req("b", ns("dev", map[string]string{"tier": "gold"})), want: []string{"10.0.1.0"}},
				{alloc: req("c", ns("dev", nil), labels(map[string]string{"app": "web"})), want: []string{"10.0.2.0"}},
				{alloc: req("d", ns("dev", nil)), wantErr: ErrNoPool},
				{alloc: req("d", ns("dev", nil), inPool("prod")), wantErr: ErrNoPool},
				{alloc: req("d", ns("dev", nil), want("10.0.0.3")), wantErr: ErrNoPool},
				// a Service that stops matching is renumbered.
				{alloc: req("c", ns("dev", map[string]string{"tier": "gold"})), want: []string{"10.0.1.1"}},
			},
		},
		{
			name:  "sync after a restart claims published addresses first",
			pools: small,
			steps: []step{
				{alloc: req("z"), want: []string{"10.0.0.0"}},
				{sync: []Request{
					*req("d", current("10.0.0.3")),
					*req("a"),
					*req("b", current("10.0.0.1")),
					*req("c", current("10.0.0.1")), // conflicting status: b wins (key order)
				}, wantSync: []string{"a=10.0.0.0", "b=10.0.0.1", "c=10.0.0.2", "d=10.0.0.3"}},
				{alloc: req("z"), wantErr: ErrPoolExhausted}, // z was not in the sync: released
			},
		},
		{
			name:  "sync reports errors per Service",
			pools: small,
			steps: []step{
				{sync: []Request{*req("a", want("192.0.2.1")), *req("b"), *req("c", want("10.0.0.0"))},
					wantSync: []string{"a!", "b=10.0.0.1", "c=10.0.0.0"}},
			},
		},
		{
			name:  "set pools",
			pools: []Pool{{Name: "p", Addresses: []string{"10.0.0.0/30"}, AutoAssign: true}},
			steps: []step{
				{alloc: req("a"), want: []string{"10.0.0.0"}},
				{alloc: req("b"), want: []string{"10.0.0.1"}},
				{alloc: req("c"), want: []string{"10.0.0.2"}},
				{pools: []Pool{{Name: "p", Addresses: []string{"10.0.0.0/30"}}, {Name: "q", Addresses: []string{"10.0.0.2/31"}}}, wantErr: errAny},
				{pools: []Pool{{Name: "p", Addresses: []string{"10.0.0.1-10.0.0.2", "10.0.0.8/30"}, AutoAssign: true}},
					want: []string{"a"}, wantStats: []string{"p 6/2"}},
				{alloc: req("a"), want: []string{"10.0.0.8"}},
				{alloc: req("b"), want: []string{"10.0.0.1"}},
			},
		},
		{
			name:  "large IPv6 pool",
			pools: []Pool{{Name: "v6", Addresses: []string{"2001:db8::/64", "2001:db8:1::/112"}, AutoAssign: true}},
			steps: []step{
				{alloc: req("a", families(IPv6)), want: []string{"2001:db8::"}},
				{alloc: req("b", families(IPv6), want("2001:db8::ffff:ffff:ffff:ffff")), want: []string{"2001:db8::ffff:ffff:ffff:ffff"}},
				{alloc: req("c", families(IPv6)), want: []string{"2001:db8::1"},
					wantStats: []string{"v6 18446744073709551615/3"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.pools, tt.steps) })
	}
}

// errAny matches any non-nil error in a step.
var errAny = errors.New("any error")

func TestNewRejectsBadPools(t *testing.T) {
	tests := []struct {
		name  string
		pools []Pool
		want  string
	}{
		{"no name", []Pool{{Addresses: []string{"10.0.0.0/24"}}}, "has no name"},
		{"twice", []Pool{{Name: "a", Addresses: []string{"10.0.0.0/24"}}, {Name: "a", Addresses: []string{"10.0.1.0/24"}}}, `pool "a" is defined twice`},
		{"no addresses", []Pool{{Name: "a"}}, "no addresses"},
		{"bad range", []Pool{{Name: "a", Addresses: []string{"10.0.0.1/24"}}}, "host bits"},
		{"overlap inside", []Pool{{Name: "a", Addresses: []string{"10.0.0.0/24", "10.0.0.128-10.0.1.3"}}}, `pool "a": 10.0.0.128-10.0.1.3 overlaps 10.0.0.0-10.0.0.255`},
		{"overlap across", []Pool{{Name: "a", Addresses: []string{"10.0.0.0/16"}}, {Name: "b", Addresses: []string{"10.0.9.0/24"}}}, `overlaps 10.0.0.0-10.0.255.255 of pool "a"`},
		{"bad selector", []Pool{{Name: "a", Addresses: []string{"10.0.0.0/24"}, ServiceSelectors: []Selector{{MatchExpressions: []Requirement{{"k", "Gt", nil}}}}}}, "unknown operator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.pools)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	a, err := New([]Pool{{Name: "p", Addresses: []string{"10.0.0.0/31"}, AutoAssign: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(*req("a", share("k"))); err != nil {
		t.Fatal(err)
	}
	_, err = a.Allocate(*req("b", want("10.0.0.0")))
	wantMsg := `allocate addresses for default/b: address conflict: 10.0.0.0 is held by default/a, sharing key "k" (this Service: "")`
	if err == nil || err.Error() != wantMsg {
		t.Errorf("error %q, want %q", err, wantMsg)
	}
	_, err = a.Allocate(*req("c", share("k"), want("10.0.0.0")))
	wantMsg = `allocate addresses for default/c: address conflict: port TCP/80 of 10.0.0.0 is used by default/a`
	if err == nil || err.Error() != wantMsg {
		t.Errorf("error %q, want %q", err, wantMsg)
	}
	a.Allocate(*req("d"))
	_, err = a.Allocate(*req("e"))
	wantMsg = `allocate addresses for default/e: pool exhausted: no free IPv4 address in pool p`
	if err == nil || err.Error() != wantMsg {
		t.Errorf("error %q, want %q", err, wantMsg)
	}
}

func TestRequestFor(t *testing.T) {
	s := &model.Service{
		Key:             key("web"),
		Type:            model.LoadBalancer,
		RequestedIPs:    addrs("192.0.2.1"),
		LoadBalancerIPs: addrs("192.0.2.2"),
		AddressPool:     "public",
		SharingKey:      "k",
		Ports:           []model.ServicePort{{Name: "http", Protocol: model.TCP, Port: 80, NodePort: 30080}, {Name: "dns", Protocol: model.UDP, Port: 53}},
	}
	want := Request{
		Key: key("web"), Pool: "public", SharingKey: "k",
		Ports:        []Port{tcp80, {53, model.UDP}},
		RequestedIPs: addrs("192.0.2.1"),
		Current:      addrs("192.0.2.2"),
	}
	if diff := cmp.Diff(want, RequestFor(s), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("RequestFor (-want +got):\n%s", diff)
	}
}

package election

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/model"
)

// The pools' selector type serves as an announcer's node selector.
var _ Matcher = ipam.Selector{}

// equateAddr compares netip.Addr values with ==.
var equateAddr = cmpopts.EquateComparable(netip.Addr{})

// labelSelector is a minimal Matcher for tests.
type labelSelector map[string]string

func (s labelSelector) Matches(l map[string]string) bool {
	for k, v := range s {
		if l[k] != v {
			return false
		}
	}
	return true
}

func nodes(names ...string) []Candidate {
	var out []Candidate
	for _, n := range names {
		out = append(out, Candidate{Name: n, Ready: true, LocalEndpoint: true, Labels: map[string]string{"role": "edge"}})
	}
	return out
}

// membership is a gossip view: node -> alive; absent nodes are unknown.
func membership(m map[string]bool) AliveFunc {
	return func(n string) (bool, bool) {
		alive, known := m[n]
		return alive, known
	}
}

func TestEligible(t *testing.T) {
	all := []Candidate{
		{Name: "ready-local", Ready: true, LocalEndpoint: true, Labels: map[string]string{"role": "edge"}},
		{Name: "ready-remote", Ready: true, Labels: map[string]string{"role": "edge"}},
		{Name: "notready-local", LocalEndpoint: true, Labels: map[string]string{"role": "edge"}},
		{Name: "other-role", Ready: true, LocalEndpoint: true, Labels: map[string]string{"role": "db"}},
		{Name: "no-labels", Ready: true, LocalEndpoint: true},
	}
	tests := []struct {
		name string
		in   Input
		want []string
	}{
		{"cluster policy, no selector", Input{Nodes: all},
			[]string{"no-labels", "other-role", "ready-local", "ready-remote"}},
		{"selector", Input{Nodes: all, Selector: labelSelector{"role": "edge"}},
			[]string{"ready-local", "ready-remote"}},
		{"local policy needs a local endpoint", Input{Nodes: all, TrafficPolicy: model.PolicyLocal},
			[]string{"no-labels", "other-role", "ready-local"}},
		{"selector and local policy", Input{Nodes: all, Selector: labelSelector{"role": "edge"}, TrafficPolicy: model.PolicyLocal},
			[]string{"ready-local"}},
		{"membership says dead: beats Ready", Input{Nodes: all, Selector: labelSelector{"role": "edge"},
			Alive: membership(map[string]bool{"ready-local": false})},
			[]string{"ready-remote"}},
		{"membership says alive: beats NotReady", Input{Nodes: all, Selector: labelSelector{"role": "edge"},
			Alive: membership(map[string]bool{"notready-local": true})},
			[]string{"notready-local", "ready-local", "ready-remote"}},
		{"membership unknown: readiness decides", Input{Nodes: all, Selector: labelSelector{"role": "edge"},
			Alive: membership(map[string]bool{"someone-else": false})},
			[]string{"ready-local", "ready-remote"}},
		{"nobody", Input{Nodes: all, Selector: labelSelector{"role": "none"}}, nil},
		{"duplicates count once", Input{Nodes: append(nodes("a", "b"), nodes("a")...)}, []string{"a", "b"}},
	}
	ip := netip.MustParseAddr("192.0.2.10")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Eligible(&tt.in)); diff != "" {
				t.Errorf("Eligible (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, BGPAnnouncers(&tt.in)); diff != "" {
				t.Errorf("BGPAnnouncers (-want +got):\n%s", diff)
			}
			owner, ok := Layer2Owner(&tt.in, ip)
			if ok != (len(tt.want) > 0) || (ok && !slices.Contains(tt.want, owner)) {
				t.Errorf("Layer2Owner = %q %v, want one of %v", owner, ok, tt.want)
			}
		})
	}
}

// specOwner is the documented rule written independently: sort the
// eligible names by the hex of sha256(name#ip), lowest wins.
func specOwner(names []string, ip string) string {
	s := slices.Clone(names)
	h := func(n string) string { d := sha256.Sum256([]byte(n + "#" + ip)); return hex.EncodeToString(d[:]) }
	sort.Slice(s, func(i, j int) bool { return h(s[i]) < h(s[j]) })
	return s[0]
}

func TestLayer2OwnerFollowsTheRule(t *testing.T) {
	names := []string{"node-a", "node-b", "node-c", "node-d", "worker-1", "worker-2"}
	in := Input{Nodes: nodes(names...)}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, s := range []string{"192.0.2.1", "192.0.2.2", "198.51.100.77", "2001:db8::1", "2001:db8::ffff", "10.255.255.255"} {
		ip := netip.MustParseAddr(s)
		want := specOwner(names, ip.String())
		got, ok := Layer2Owner(&in, ip)
		if !ok || got != want {
			t.Errorf("%s: owner %q, want %q", s, got, want)
		}
		// The order nodes are listed in never matters.
		for range 5 {
			shuffled := Input{Nodes: slices.Clone(in.Nodes)}
			rng.Shuffle(len(shuffled.Nodes), func(i, j int) { shuffled.Nodes[i], shuffled.Nodes[j] = shuffled.Nodes[j], shuffled.Nodes[i] })
			if o, _ := Layer2Owner(&shuffled, ip); o != want {
				t.Errorf("%s: owner %q with nodes reordered, want %q", s, o, want)
			}
		}
	}
}

func manyIPs(n int) []netip.Addr {
	var out []netip.Addr
	a := netip.MustParseAddr("10.0.0.1")
	for range n / 2 {
		out = append(out, a)
		a = a.Next()
	}
	b := netip.MustParseAddr("2001:db8::1")
	for range n - n/2 {
		out = append(out, b)
		b = b.Next()
	}
	return out
}

func names(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("node-%02d", i))
	}
	return out
}

// moves returns the addresses whose owner differs between two elections.
func moves(before, after map[netip.Addr]string) map[netip.Addr][2]string {
	out := map[netip.Addr][2]string{}
	for ip, b := range before {
		if a := after[ip]; a != b {
			out[ip] = [2]string{b, a}
		}
	}
	for ip, a := range after {
		if _, ok := before[ip]; !ok {
			out[ip] = [2]string{"", a}
		}
	}
	return out
}

func TestStability(t *testing.T) {
	ips := manyIPs(4000)
	base := Input{Nodes: nodes(names(10)...), Selector: labelSelector{"role": "edge"}}
	before := Layer2Owners(&base, ips)
	if len(before) != len(ips) {
		t.Fatalf("%d of %d addresses have an owner", len(before), len(ips))
	}

	t.Run("unrelated nodes come and go", func(t *testing.T) {
		in := base
		in.Nodes = append(slices.Clone(base.Nodes),
			Candidate{Name: "db-1", Ready: true, LocalEndpoint: true, Labels: map[string]string{"role": "db"}},
			Candidate{Name: "edge-down", Ready: false, LocalEndpoint: true, Labels: map[string]string{"role": "edge"}},
		)
		if m := moves(before, Layer2Owners(&in, ips)); len(m) != 0 {
			t.Errorf("%d addresses moved when ineligible nodes appeared", len(m))
		}
	})

	for _, how := range []string{"removed", "not ready", "dead in membership", "selector no longer matches"} {
		t.Run("owner "+how, func(t *testing.T) {
			const victim = "node-03"
			in := base
			in.Nodes = slices.Clone(base.Nodes)
			i := slices.IndexFunc(in.Nodes, func(c Candidate) bool { return c.Name == victim })
			switch how {
			case "removed":
				in.Nodes = slices.Delete(in.Nodes, i, i+1)
			case "not ready":
				in.Nodes[i].Ready = false
			case "dead in membership":
				in.Alive = membership(map[string]bool{victim: false, "node-01": true})
			case "selector no longer matches":
				in.Nodes[i].Labels = map[string]string{"role": "db"}
			}
			after := Layer2Owners(&in, ips)
			m := moves(before, after)
			owned := 0
			for ip, o := range before {
				if o == victim {
					owned++
					// It goes to the node ranked second before the failure:
					// the owner among the others.
					others := Input{Nodes: slices.DeleteFunc(slices.Clone(base.Nodes), func(c Candidate) bool { return c.Name == victim })}
					if want, _ := Layer2Owner(&others, ip); after[ip] != want {
						t.Errorf("%s moved to %s, want the runner-up %s", ip, after[ip], want)
					}
				}
			}
			for ip, mv := range m {
				if mv[0] != victim {
					t.Errorf("%s moved from %s to %s, though %s is fine", ip, mv[0], mv[1], mv[0])
				}
			}
			if len(m) != owned {
				t.Errorf("%d addresses moved, %s owned %d", len(m), victim, owned)
			}
		})
	}

	t.Run("a new node only takes addresses", func(t *testing.T) {
		in := base
		in.Nodes = append(slices.Clone(base.Nodes), nodes("node-10")...)
		m := moves(before, Layer2Owners(&in, ips))
		for ip, mv := range m {
			if mv[1] != "node-10" {
				t.Errorf("%s moved from %s to %s, not to the new node", ip, mv[0], mv[1])
			}
		}
		share := float64(len(m)) / float64(len(ips))
		t.Logf("a node joining 10 takes %d of %d addresses (%.1f%%, ideal %.1f%%)", len(m), len(ips), 100*share, 100.0/11)
		if share < 0.5/11 || share > 2.0/11 {
			t.Errorf("the new node took %.1f%% of the addresses, want about %.1f%%", 100*share, 100.0/11)
		}
	})
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct{ nodes, ips int }{{3, 3000}, {10, 10000}, {50, 10000}} {
		t.Run(fmt.Sprintf("%d nodes, %d addresses", tc.nodes, tc.ips), func(t *testing.T) {
			in := Input{Nodes: nodes(names(tc.nodes)...)}
			count := map[string]int{}
			for _, o := range Layer2Owners(&in, manyIPs(tc.ips)) {
				count[o]++
			}
			mean := float64(tc.ips) / float64(tc.nodes)
			lo, hi, sq := math.MaxInt, 0, 0.0
			for _, n := range names(tc.nodes) {
				c := count[n]
				lo, hi = min(lo, c), max(hi, c)
				sq += (float64(c) - mean) * (float64(c) - mean)
			}
			sd := math.Sqrt(sq / float64(tc.nodes))
			t.Logf("per node: mean %.0f, min %d (%+.1f%%), max %d (%+.1f%%), stddev %.1f (binomial %.1f)",
				mean, lo, 100*(float64(lo)/mean-1), hi, 100*(float64(hi)/mean-1), sd, math.Sqrt(mean*(1-1/float64(tc.nodes))))
			// The inputs are fixed, so this is deterministic: it fails only if
			// the ranking stops being uniform.
			if float64(lo) < 0.8*mean || float64(hi) > 1.2*mean {
				t.Errorf("spread min %d max %d, want within 20%% of %.0f", lo, hi, mean)
			}
		})
	}
}

func TestDualStack(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	ips := []netip.Addr{v4, v6}

	t.Run("each family elected on its own", func(t *testing.T) {
		in := Input{Nodes: nodes(names(8)...)}
		got := Layer2Owners(&in, ips)
		want := map[netip.Addr]string{v4: specOwner(names(8), v4.String()), v6: specOwner(names(8), v6.String())}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("owners (-want +got):\n%s", diff)
		}
		// Every node agrees, and exactly one announces each address.
		per := map[netip.Addr]int{}
		for _, n := range names(8) {
			for _, ip := range Announced(Layer2, n, &in, ips) {
				per[ip]++
			}
		}
		if diff := cmp.Diff(map[netip.Addr]int{v4: 1, v6: 1}, per); diff != "" {
			t.Errorf("announcers per address (-want +got):\n%s", diff)
		}
	})

	t.Run("local policy keeps both on the endpoint's node", func(t *testing.T) {
		in := Input{Nodes: nodes(names(8)...), TrafficPolicy: model.PolicyLocal}
		for i := range in.Nodes {
			in.Nodes[i].LocalEndpoint = in.Nodes[i].Name == "node-05"
		}
		want := map[netip.Addr]string{v4: "node-05", v6: "node-05"}
		if diff := cmp.Diff(want, Layer2Owners(&in, ips)); diff != "" {
			t.Errorf("owners (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(ips, Announced(Layer2, "node-05", &in, ips), equateAddr); diff != "" {
			t.Errorf("Announced (-want +got):\n%s", diff)
		}
		if got := Announced(Layer2, "node-04", &in, ips); got != nil {
			t.Errorf("node-04 announces %v without a local endpoint", got)
		}
	})

	t.Run("local policy without endpoints: nobody announces", func(t *testing.T) {
		in := Input{Nodes: nodes(names(4)...), TrafficPolicy: model.PolicyLocal}
		for i := range in.Nodes {
			in.Nodes[i].LocalEndpoint = false
		}
		if got := Layer2Owners(&in, ips); len(got) != 0 {
			t.Errorf("owners %v, want none", got)
		}
		if got := BGPAnnouncers(&in); got != nil {
			t.Errorf("BGP announcers %v, want none", got)
		}
	})
}

func TestAnnouncedBGP(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")}
	in := Input{Nodes: nodes("a", "b", "c"), Selector: labelSelector{"role": "edge"}}
	in.Nodes[2].Labels = nil
	for _, tc := range []struct {
		node string
		want []netip.Addr
	}{{"a", ips}, {"b", ips}, {"c", nil}, {"unknown", nil}} {
		if diff := cmp.Diff(tc.want, Announced(BGP, tc.node, &in, ips), equateAddr); diff != "" {
			t.Errorf("%s: Announced (-want +got):\n%s", tc.node, diff)
		}
	}
}

// TestAnnouncedCutOff: a node gossip reports not alive about itself
// (membership's guard, when it may be cut off from a majority) answers
// for no layer-2 address, but keeps its BGP routes, which every eligible
// node announces anyway; the others still elect it by Kubernetes
// readiness when gossip has no opinion of it.
func TestAnnouncedCutOff(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12")}
	in := Input{Nodes: nodes("a", "b", "c"), Alive: func(n string) (bool, bool) {
		if n == "a" {
			return false, true // a's gossip: "I am cut off"
		}
		return false, false // no opinion of the others
	}}
	if got := Announced(Layer2, "a", &in, ips); got != nil {
		t.Errorf("layer 2: a announces %v while cut off, want nothing", got)
	}
	if diff := cmp.Diff(ips, Announced(BGP, "a", &in, ips), equateAddr); diff != "" {
		t.Errorf("BGP: a's announcements while cut off (-want +got):\n%s", diff)
	}
	// Without gossip's opinion, a owns its share again.
	in.Alive = nil
	if got := Announced(Layer2, "a", &in, ips); len(got) == 0 {
		t.Errorf("layer 2: a owns none of %v by readiness alone; pick addresses it owns", ips)
	}
}

func TestCandidateFrom(t *testing.T) {
	n := &model.Node{Name: "n1", Ready: true, Labels: map[string]string{"a": "b"}}
	want := Candidate{Name: "n1", Ready: true, Labels: map[string]string{"a": "b"}, LocalEndpoint: true}
	if diff := cmp.Diff(want, CandidateFrom(n, true)); diff != "" {
		t.Errorf("CandidateFrom (-want +got):\n%s", diff)
	}
}

func BenchmarkLayer2Owner(b *testing.B) {
	in := Input{Nodes: nodes(names(100)...)}
	ip := netip.MustParseAddr("192.0.2.10")
	for b.Loop() {
		Layer2Owner(&in, ip)
	}
}

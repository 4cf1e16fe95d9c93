package lb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestAnnouncerSlot: an announcer's pools and node selector follow
// reloads of the pools and of the announcer.
func TestAnnouncerSlot(t *testing.T) {
	pools := ipamPools([]config.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/28", "2001:db8::/120"}},
		{Name: "range", Addresses: []string{"198.51.100.10-198.51.100.20"}},
		{Name: "other", Addresses: []string{"203.0.113.0/24"}},
	})
	ac := config.Announcer{Name: "l2", Type: config.AnnouncerARP, Pools: []string{"public", "range"}}
	s := newAnnouncerSlot(ac, pools)
	check := func(when string, want map[string]bool) {
		t.Helper()
		for addr, want := range want {
			if got := s.serves(netip.MustParseAddr(addr)); got != want {
				t.Errorf("%s: serves(%s) = %v, want %v", when, addr, got, want)
			}
		}
	}
	check("at start", map[string]bool{
		"192.0.2.15": true, "192.0.2.16": false, "2001:db8::ff": true, "2001:db8::1:0": false,
		"198.51.100.10": true, "198.51.100.20": true, "198.51.100.21": false, "203.0.113.1": false,
	})
	if !s.Matches(map[string]string{"any": "node"}) {
		t.Error("an announcer without a node selector does not match every node")
	}
	// A reload grows "public" and shrinks "range".
	pools = ipamPools([]config.Pool{
		{Name: "public", Addresses: []string{"192.0.2.0/27"}},
		{Name: "range", Addresses: []string{"198.51.100.10-198.51.100.11"}},
		{Name: "other", Addresses: []string{"203.0.113.0/24"}},
	})
	v := s.version.Load()
	s.setPools(pools)
	if s.version.Load() == v {
		t.Error("a reload of the pools left the version (the loop would not elect again)")
	}
	check("after a reload of the pools", map[string]bool{
		"192.0.2.16": true, "2001:db8::ff": false, "198.51.100.11": true, "198.51.100.12": false, "203.0.113.1": false,
	})
	// A reload of the announcer: other pools, a node selector.
	next := ac
	next.Pools, next.NodeSelector = []string{"other"}, map[string]string{"edge": "true"}
	if err := s.reloadable(next); err != nil {
		t.Fatalf("reloadable(pools and nodeSelector) = %v", err)
	}
	v = s.version.Load()
	s.apply(next, pools)
	if s.version.Load() == v {
		t.Error("a reload of the announcer left the version (the loop would not elect again)")
	}
	check("after a reload of the announcer", map[string]bool{"192.0.2.1": false, "203.0.113.1": true})
	if s.Matches(map[string]string{"any": "node"}) || !s.Matches(map[string]string{"edge": "true"}) {
		t.Error("the reloaded node selector is not in force")
	}
	next.Pools = nil
	s.apply(next, pools)
	check("without pools", map[string]bool{"192.0.2.1": true, "10.0.0.1": true})

	other := next
	other.ARP = &config.ARPAnnouncer{Interfaces: []string{"eth1"}}
	if err := s.reloadable(other); err == nil {
		t.Error("reloadable accepted a change of the ARP settings")
	}
}

func TestIPAMPools(t *testing.T) {
	no := false
	got := ipamPools([]config.Pool{
		{Name: "a", Addresses: []string{"192.0.2.0/28"}},
		{Name: "b", Addresses: []string{"192.0.2.16/28"}, AutoAssign: &no, AvoidBuggyIPs: true, Namespaces: []string{"prod"},
			ServiceSelectors: []config.LabelSelector{{MatchLabels: map[string]string{"tier": "edge"},
				MatchExpressions: []config.LabelSelectorRequirement{{Key: "env", Operator: "In", Values: []string{"prod"}}}}}},
	})
	want := []ipam.Pool{
		{Name: "a", Addresses: []string{"192.0.2.0/28"}, AutoAssign: true},
		{Name: "b", Addresses: []string{"192.0.2.16/28"}, AvoidBuggyIPs: true, Namespaces: []string{"prod"},
			ServiceSelectors: []ipam.Selector{{MatchLabels: map[string]string{"tier": "edge"},
				MatchExpressions: []ipam.Requirement{{Key: "env", Operator: ipam.OpIn, Values: []string{"prod"}}}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ipamPools (-want +got):\n%s", diff)
	}
}

func TestBGPConfig(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The router ID is the first IPv4 InternalIP: not an ExternalIP.
	self := &model.Node{Name: "node-a", Labels: map[string]string{"rack": "r1"}, StatusAddresses: []model.NodeAddress{
		{Type: model.NodeExternalIP, Address: "203.0.113.1"}, {Type: model.NodeInternalIP, Address: "fd00::1"},
		{Type: model.NodeInternalIP, Address: "10.0.0.1"}, {Type: model.NodeInternalIP, Address: "10.0.0.2"},
	}}
	ann := func(b config.BGPAnnouncer) config.Announcer {
		return config.Announcer{Name: "tor", Type: config.AnnouncerBGP, BGP: &b}
	}
	tests := []struct {
		name        string
		ac          config.Announcer
		want        bgp.Config
		wantSecrets []string // announcer, peer, Secret/key
		wantErr     bool
	}{
		{
			name: "router ID from the node, password file, selected peers only",
			ac: ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{
				{Address: "10.0.0.254", ASN: 64513, Port: 1179, HoldTime: config.Duration(9 * time.Second),
					PasswordFile: pwFile, EBGPMultihop: 2, Communities: []string{"64512:1"}, NodeSelector: map[string]string{"rack": "r1"}},
				{Address: "10.0.1.254", ASN: 64513, NodeSelector: map[string]string{"rack": "r2"}},
			}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []bgp.Peer{{
				Address: netip.MustParseAddr("10.0.0.254"), ASN: 64513, Port: 1179, HoldTime: 9 * time.Second,
				Password: "s3cret", EBGPMultihopTTL: 2, Communities: []string{"64512:1"},
			}}},
		},
		{
			name: "configured router ID",
			ac:   ann(config.BGPAnnouncer{ASN: 64512, RouterID: "192.0.2.1", ListenPort: 1790}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("192.0.2.1"), ListenPort: 1790},
		},
		{
			name: "a peer with a password Secret is down until the Secret is read",
			ac:   ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordSecret: &config.SecretKeyRef{Name: "bgp", Key: "pw"}}}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []bgp.Peer{{
				Address: netip.MustParseAddr("10.0.0.254"), ASN: 1, AdminDown: true,
			}}},
			wantSecrets: []string{"tor 10.0.0.254 bgp/pw"},
		},
		{
			name: "a peer with BFD",
			ac: ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1,
				BFD: &config.BGPPeerBFD{MinRx: config.Duration(300 * time.Millisecond), MinTx: config.Duration(100 * time.Millisecond), Multiplier: 4}}}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("10.0.0.1"), Peers: []bgp.Peer{{
				Address: netip.MustParseAddr("10.0.0.254"), ASN: 1,
				BFD: &bgp.BFD{MinRx: 300 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 4},
			}}},
		},
		{
			name: "graceful restart",
			ac: ann(config.BGPAnnouncer{ASN: 64512, RouterID: "192.0.2.1",
				GracefulRestart: &config.BGPGracefulRestart{Enabled: true, RestartTime: config.Duration(30 * time.Second)}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("192.0.2.1"),
				GracefulRestart: bgp.GracefulRestart{Enabled: true, RestartTime: 30 * time.Second}},
		},
		{
			name: "graceful restart configured but not enabled",
			ac: ann(config.BGPAnnouncer{ASN: 64512, RouterID: "192.0.2.1",
				GracefulRestart: &config.BGPGracefulRestart{RestartTime: config.Duration(30 * time.Second)}}),
			want: bgp.Config{Name: "tor", LocalASN: 64512, RouterID: netip.MustParseAddr("192.0.2.1")},
		},
		{
			name:    "missing password file",
			ac:      ann(config.BGPAnnouncer{ASN: 64512, Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 1, PasswordFile: pwFile + ".missing"}}}),
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, secrets, err := bgpConfig(tt.ac, self)
			if (err != nil) != tt.wantErr {
				t.Fatalf("bgpConfig error = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("bgpConfig (-want +got):\n%s", diff)
			}
			var gotSecrets []string
			for _, sp := range secrets {
				gotSecrets = append(gotSecrets, fmt.Sprintf("%s %s %s/%s", sp.announcer, sp.peer, sp.ref.Name, sp.ref.Key))
			}
			if diff := cmp.Diff(tt.wantSecrets, gotSecrets); diff != "" {
				t.Errorf("bgpConfig's Secret peers (-want +got):\n%s", diff)
			}
		})
	}

	// Without an IPv4 address and a configured router ID there is none.
	if _, _, err := bgpConfig(ann(config.BGPAnnouncer{ASN: 64512}), &model.Node{Name: "v6", StatusAddresses: []model.NodeAddress{{Type: model.NodeInternalIP, Address: "fd00::1"}, {Type: model.NodeExternalIP, Address: "203.0.113.1"}}}); err == nil {
		t.Error("bgpConfig without an IPv4 router ID succeeded")
	}
}

// recordingType is an announcer type registered beside the built-in
// ones: what its instance is given is recorded.
type recordingType struct {
	mu    sync.Mutex
	nodes [][]string
	self  string
	tag   string // from its settings block
}

// recordingSettings is the recording type's settings block
// (config.Announcer.Settings).
type recordingSettings struct {
	Tag string `yaml:"tag"`
}

func checkRecording(ac config.Announcer) (recordingSettings, error) {
	var s recordingSettings
	if err := ac.DecodeSettings(&s); err != nil {
		return s, err
	}
	if ac.Settings != nil && s.Tag == "" {
		return s, errors.New("settings.tag: required")
	}
	return s, nil
}

func (r *recordingType) typ() Type {
	return Type{Mode: election.Layer2, NeedsNode: true, Check: func(ac config.Announcer) error {
		_, err := checkRecording(ac)
		return err
	}, New: func(_ context.Context, env Env, ac config.Announcer) (*Instance, error) {
		s, err := checkRecording(ac)
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.self = env.Self.Name
		r.tag = s.Tag
		r.mu.Unlock()
		return &Instance{Announcer: &serialAnnouncer{}, SetNodes: func(nodes []*model.Node) error {
			var names []string
			for _, n := range nodes {
				names = append(names, n.Name)
			}
			r.mu.Lock()
			r.nodes = append(r.nodes, names)
			r.mu.Unlock()
			return nil
		}}, nil
	}}
}

func (r *recordingType) last() (string, []string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.nodes) == 0 {
		return r.self, nil, 0
	}
	return r.self, r.nodes[len(r.nodes)-1], len(r.nodes)
}

// TestManagerRegisteredType runs a Manager with an announcer of a type
// registered by one line: the loop's nodes start it with this node, it
// gets the ready nodes its node selector picks, and a reload of the
// selector gives it the new selection.
func TestManagerRegisteredType(t *testing.T) {
	rec := &recordingType{}
	types := Builtin()
	types["recording"] = rec.typ()
	reg := prometheus.NewRegistry()
	ac := config.Announcer{Name: "rec", Type: "recording", NodeSelector: map[string]string{"edge": "true"}}
	m, err := New(t.Context(), Config{
		Client: fake.NewClientset(), NodeName: "n1", Namespace: "ns", Types: types,
		Registerer: reg, Trigger: func() {}, Log: discard(),
	}, &config.Config{
		Announcers: []config.Announcer{ac},
		Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if len(m.Elected()) != 1 || m.Elected()[0].Announcer.Name() != "rec" {
		t.Fatalf("Elected = %+v, want the one announcer named rec", m.Elected())
	}
	edge := map[string]string{"edge": "true"}
	m.SetNodes(map[string]*model.Node{
		"n1": {Name: "n1", Ready: true, Labels: edge},
		"n2": {Name: "n2", Ready: true},
		"n3": {Name: "n3", Ready: false, Labels: edge},
		"n4": {Name: "n4", Ready: true, Labels: edge},
	})
	wait := func(want []string, calls int) {
		t.Helper()
		harness.Poll(t, time.Minute, func() error {
			if _, _, n := rec.last(); n < calls {
				return fmt.Errorf("the announcer got %d node sets, want %d", n, calls)
			}
			return nil
		})
		if self, got, _ := rec.last(); self != "n1" || !slices.Equal(got, want) {
			t.Fatalf("started for %q with nodes %v, want n1 with %v", self, got, want)
		}
	}
	wait([]string{"n1", "n4"}, 1)
	next := ac
	next.NodeSelector = nil
	if err := m.SetAnnouncers([]config.Announcer{next}); err != nil {
		t.Fatal(err)
	}
	wait([]string{"n1", "n2", "n4"}, 2)
	if err := m.SetAnnouncers([]config.Announcer{{Name: "rec", Type: "arp"}}); err == nil {
		t.Error("SetAnnouncers took a change of type")
	}
}

// TestRegisteredTypeConfig: a config names a registered type and gives
// its settings in a settings block, which the type decodes strictly;
// Types.Check refuses an unregistered type, naming the registered ones,
// and reports the type's own Check at the announcer's path; the daemon
// passes it to config.Parse, so such a config never reaches New.
func TestRegisteredTypeConfig(t *testing.T) {
	const header = "apiVersion: " + config.APIVersion + "\nkind: " + config.Kind + "\nannouncers:\n"
	rec := &recordingType{}
	types := Builtin()
	types["recording"] = rec.typ()
	tests := []struct {
		name string
		in   string
		want []config.FieldError
	}{
		{name: "settings", in: "- {name: rec, type: recording, settings: {tag: blue}}\n"},
		{name: "no settings", in: "- {name: rec, type: recording}\n"},
		{name: "unregistered", in: "- {name: rec, type: carrier-pigeon}\n", want: []config.FieldError{
			{Path: "announcers[0].type", Line: 4, Msg: `unknown type "carrier-pigeon" (want arp, bgp, cloud or recording)`},
		}},
		{name: "unknown setting", in: "- {name: rec, type: recording, settings: {tag: blue, colour: red}}\n", want: []config.FieldError{
			{Path: "announcers[0]", Line: 4, Msg: `settings: unknown field "colour"`},
		}},
		{name: "the type's check", in: "- {name: rec, type: recording, settings: {}}\n", want: []config.FieldError{
			{Path: "announcers[0]", Line: 4, Msg: "settings.tag: required"},
		}},
		{name: "settings of a built-in type", in: "- {name: l2, type: arp, settings: {tag: blue}}\n", want: []config.FieldError{
			{Path: "announcers[0].settings", Line: 4, Msg: `set, but type "arp" takes its settings in "arp"`},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(header+tt.in), types.Check)
			var got []config.FieldError
			for _, e := range errorsOf(err) {
				got = append(got, *e)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse errors (-want +got):\n%s\n%v", diff, err)
			}
		})
	}

	c, err := config.Parse([]byte(header+"- {name: rec, type: recording, settings: {tag: blue}}\n"), types.Check)
	if err != nil {
		t.Fatal(err)
	}
	c.Membership = config.Membership{BindAddress: "127.0.0.1", Port: -1}
	m, err := New(t.Context(), Config{
		Client: fake.NewClientset(), NodeName: "n1", Namespace: "ns", Types: types,
		Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
	}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetNodes(map[string]*model.Node{"n1": {Name: "n1", Ready: true}})
	harness.Poll(t, time.Minute, func() error {
		if _, _, n := rec.last(); n == 0 {
			return errors.New("the recording announcer was not built")
		}
		return nil
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.tag != "blue" {
		t.Errorf("the announcer was built with tag %q, want blue", rec.tag)
	}
}

// errorsOf returns the FieldErrors of a Parse error, nil for nil.
func errorsOf(err error) config.Errors {
	var errs config.Errors
	if err != nil && !errors.As(err, &errs) {
		errs = config.Errors{{Msg: err.Error()}}
	}
	return errs
}

// TestManagerRefuses: an unknown type, or a config error of a type that
// waits for the node, stops New at once.
func TestManagerRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	tests := []struct {
		ac   config.Announcer
		want string
	}{
		{config.Announcer{Name: "x", Type: "carrier-pigeon"}, `announcer x: unknown type "carrier-pigeon"`},
		{config.Announcer{Name: "tor", Type: config.AnnouncerBGP, BGP: &config.BGPAnnouncer{ASN: 64512,
			Peers: []config.BGPPeer{{Address: "10.0.0.254", ASN: 64513, PasswordFile: missing}}}},
			"announcer tor: peer 10.0.0.254: password: open " + missing + ": no such file or directory"},
	}
	for _, tt := range tests {
		_, err := New(t.Context(), Config{
			Client: fake.NewClientset(), NodeName: "n1", Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
		}, &config.Config{
			Announcers: []config.Announcer{tt.ac},
			Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1},
		})
		if err == nil || err.Error() != tt.want {
			t.Errorf("New(%s) = %v, want %q", tt.ac.Name, err, tt.want)
		}
	}
}

// TestManagerCloseIntent: Close ends an announcer with its Restart when
// this node's Node, as the loop's nodes last reported it, says the
// daemon restarts, and with Close when the node is going away or gone;
// an announcer without Restart is closed either way.
func TestManagerCloseIntent(t *testing.T) {
	n1 := func(n model.Node) map[string]*model.Node { n.Name = "n1"; return map[string]*model.Node{"n1": &n} }
	tests := []struct {
		name        string
		nodes       []map[string]*model.Node // SetNodes calls, in order
		withRestart bool
		want        string
	}{
		{name: "never reported", withRestart: true, want: "restart"},
		{name: "ready", nodes: []map[string]*model.Node{n1(model.Node{Ready: true})}, withRestart: true, want: "restart"},
		{name: "cordoned", nodes: []map[string]*model.Node{n1(model.Node{Ready: true, Unschedulable: true})}, withRestart: true, want: "close"},
		{name: "being deleted", nodes: []map[string]*model.Node{n1(model.Node{Deleting: true})}, withRestart: true, want: "close"},
		{name: "shutting down", nodes: []map[string]*model.Node{n1(model.Node{ShuttingDown: true})}, withRestart: true, want: "close"},
		{name: "deleted", nodes: []map[string]*model.Node{n1(model.Node{Ready: true}), {"n2": {Name: "n2"}}}, withRestart: true, want: "close"},
		{name: "uncordoned again", nodes: []map[string]*model.Node{n1(model.Node{Unschedulable: true}), n1(model.Node{Ready: true})}, withRestart: true, want: "restart"},
		{name: "restart without Restart", nodes: []map[string]*model.Node{n1(model.Node{Ready: true})}, want: "close"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &serialAnnouncer{t: t}
			typ := Type{Mode: election.BGP, New: func(context.Context, Env, config.Announcer) (*Instance, error) {
				inst := &Instance{Announcer: a}
				if tt.withRestart {
					inst.Restart = func() error { defer a.enter("restart")(); return nil }
				}
				return inst, nil
			}}
			m, err := New(t.Context(), Config{
				Client: fake.NewClientset(), NodeName: "n1", Namespace: "ns", Types: Types{"recording": typ},
				Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
			}, &config.Config{
				Announcers: []config.Announcer{{Name: "rec", Type: "recording"}},
				Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, nodes := range tt.nodes {
				m.SetNodes(nodes)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tt.want}, a.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestManagerCloseLeavesGossip: Close leaves gossip saying the daemon
// restarts when its Node says it restarts and the config has a restart
// grace, so that another daemon (with a grace too) holds it; it leaves
// for good when the node is going away or without a grace.
func TestManagerCloseLeavesGossip(t *testing.T) {
	tests := []struct {
		name  string
		node  model.Node
		grace time.Duration
		want  string // what the other daemon records
	}{
		{"restart", model.Node{Ready: true}, time.Hour, "restarting"},
		{"restart without a grace", model.Node{Ready: true}, 0, "left"},
		{"cordoned", model.Node{Ready: true, Unschedulable: true}, time.Hour, "left"},
		{"being deleted", model.Node{Ready: true, Deleting: true}, time.Hour, "left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			grace := config.Duration(tt.grace)
			typ := Type{Mode: election.Layer2, New: func(context.Context, Env, config.Announcer) (*Instance, error) {
				return &Instance{Announcer: &serialAnnouncer{t: t}}, nil
			}}
			m, err := New(t.Context(), Config{
				Client: fake.NewClientset(), NodeName: "n1", Namespace: "ns", Types: Types{"recording": typ},
				Registerer: prometheus.NewRegistry(), Trigger: func() {}, Log: discard(),
			}, &config.Config{
				Announcers: []config.Announcer{{Name: "rec", Type: "recording"}},
				Membership: config.Membership{BindAddress: "127.0.0.1", Port: -1, RestartGrace: &grace},
			})
			if err != nil {
				t.Fatal(err)
			}
			other, err := membership.New(membership.Config{NodeName: "n2", BindAddr: "127.0.0.1", BindPort: -1, RestartGrace: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); _ = other.Run(ctx) }()
			defer func() { _ = other.Close(context.Background()); cancel(); <-done }()
			other.SetPeers([]membership.Peer{{Name: "n1", Addr: m.members.LocalAddr().String()}})
			harness.Poll(t, 2*time.Minute, harness.Cond("n2 sees n1 alive", func() bool { return state(other, "n1") == "alive" }))

			tt.node.Name = "n1"
			m.SetNodes(map[string]*model.Node{"n1": &tt.node})
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			harness.Poll(t, 2*time.Minute, harness.Cond("n2 sees n1 "+tt.want, func() bool { return state(other, "n1") == tt.want }))
		})
	}
}

func state(m *membership.Membership, node string) string {
	for _, mem := range m.Members() {
		if mem.Name == node {
			return mem.State.String()
		}
	}
	return ""
}

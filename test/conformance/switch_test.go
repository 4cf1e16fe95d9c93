package conformance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMeasureOutage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int, ok bool) Sample { return Sample{At: t0.Add(time.Duration(ms) * time.Millisecond), OK: ok} }
	for _, tc := range []struct {
		name    string
		samples []Sample
		want    Outage
	}{
		{"none", nil, Outage{}},
		{"all answered", []Sample{at(0, true), at(200, true)}, Outage{Requests: 2, Recovered: true}},
		{"one gap", []Sample{at(0, true), at(200, false), at(400, false), at(600, true), at(800, true)},
			Outage{Requests: 5, Failed: 2, Without: 600 * time.Millisecond, Recovered: true}},
		{"two gaps: from the first failure's last answer to the last failure's next", []Sample{
			at(0, true), at(200, false), at(400, true), at(600, false), at(800, true)},
			Outage{Requests: 5, Failed: 2, Without: 800 * time.Millisecond, Recovered: true}},
		{"failing from the start", []Sample{at(0, false), at(200, false), at(400, true)},
			Outage{Requests: 3, Failed: 2, Without: 400 * time.Millisecond, Recovered: true}},
		{"never recovered", []Sample{at(0, true), at(200, false), at(500, false)},
			Outage{Requests: 3, Failed: 2, Without: 500 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MeasureOutage(tc.samples)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestOutageJSON(t *testing.T) {
	b, err := json.Marshal(Outage{Requests: 10, Failed: 3, Without: 1500 * time.Millisecond, Recovered: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"requests":10,"failed":3,"withoutSeconds":1.5,"recovered":true}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestParseGuestSamples(t *testing.T) {
	got, err := ParseGuestSamples("1700000000.250000000 1\n1700000000.5 0\n\n1700000001 1\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{At: time.Unix(1700000000, 250000000), OK: true},
		{At: time.Unix(1700000000, 500000000), OK: false},
		{At: time.Unix(1700000001, 0), OK: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	for _, bad := range []string{"1700000000.1 2", "x 1", "1700000000.1"} {
		if _, err := ParseGuestSamples(bad); err == nil {
			t.Errorf("ParseGuestSamples(%q) = nil error", bad)
		}
	}
}

// kubeProxyState is kernelStateScript's output on the node with
// kube-proxy (IPVS mode) running; kubeletState without it.
const (
	kubeletState = `== links
lo
eth0
cni0
== ipsets
== iptables ipv4
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
== iptables ipv6
*mangle
:KUBE-KUBELET-CANARY - [0:0]
== nft
table ip mangle
table ip filter
table ip6 mangle
== ipvs
`
	kubeProxyState = `== links
lo
eth0
cni0
kube-ipvs0
== ipsets
KUBE-CLUSTER-IP
KUBE-LOOP-BACK
== iptables ipv4
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-IPTABLES-HINT - [0:0]
:KUBE-KUBELET-CANARY - [0:0]
*nat
:KUBE-SERVICES - [0:0]
*filter
:INPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
== iptables ipv6
*mangle
:KUBE-KUBELET-CANARY - [0:0]
== nft
table ip mangle
table ip filter
table ip nat
table ip kube-proxy
table ip6 mangle
== ipvs
-A -t 10.96.0.1:443 -s rr
-A -t 192.168.100.2:30080 -s rr
`
	switchyardState = `== links
lo
eth0
switchyard0
== ipsets
== iptables ipv4
== iptables ipv6
== nft
table inet switchyard
table inet switchyard-dsr
table ip filter
== ipvs
-A -t 10.96.0.1:443 -s rr
`
)

func TestKernelStateLeftovers(t *testing.T) {
	kubelet, err := ParseKernelState(kubeletState)
	if err != nil {
		t.Fatal(err)
	}
	wantKubelet := KernelState{
		Links: []string{"lo", "eth0", "cni0"},
		Chains: []string{"ipv4 mangle PREROUTING", "ipv4 mangle KUBE-IPTABLES-HINT", "ipv4 mangle KUBE-KUBELET-CANARY",
			"ipv4 filter INPUT", "ipv4 filter KUBE-FIREWALL", "ipv6 mangle KUBE-KUBELET-CANARY"},
		NFTables: []string{"ip mangle", "ip filter", "ip6 mangle"},
	}
	if diff := cmp.Diff(wantKubelet, kubelet); diff != "" {
		t.Errorf("ParseKernelState (-want +got)\n%s", diff)
	}
	kp, err := ParseKernelState(kubeProxyState)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := ParseKernelState(switchyardState)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want []string
	}{
		{"kube-proxy's on the kubelet's node", KubeProxyLeft(kubelet, kubelet), nil},
		{"kube-proxy's with it running", KubeProxyLeft(kubelet, kp), []string{
			"link kube-ipvs0", "ipset KUBE-CLUSTER-IP", "ipset KUBE-LOOP-BACK",
			"iptables chain ipv4 nat KUBE-SERVICES", "iptables chain ipv4 filter KUBE-PROXY-FIREWALL",
			"nftables table ip kube-proxy",
			"IPVS service -t 10.96.0.1:443 -s rr", "IPVS service -t 192.168.100.2:30080 -s rr"}},
		{"Switchyard's on the kubelet's node", SwitchyardLeft(kubelet), nil},
		{"Switchyard's with it running", SwitchyardLeft(sw), []string{
			"link switchyard0", "nftables table inet switchyard", "nftables table inet switchyard-dsr",
			"IPVS service -t 10.96.0.1:443 -s rr"}},
		{"kube-proxy's beside Switchyard: only the IPVS services, which are Switchyard's", KubeProxyLeft(kubelet, sw), []string{
			"IPVS service -t 10.96.0.1:443 -s rr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"", "stray\n== links\n", "== links\nlo\n",
		switchyardState + "sh: 6: ipvsadm: not found\n", strings.Replace(kubeletState, "== nft\n", "== nft\nError: no such file\n", 1)} {
		if _, err := ParseKernelState(bad); err == nil {
			t.Errorf("ParseKernelState(%q) = nil error", bad)
		}
	}
}

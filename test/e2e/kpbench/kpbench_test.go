package kpbench

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestNewWorkload(t *testing.T) {
	w, err := NewWorkload(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	want := Workload{Services: []Service{
		{Name: "svc-00000", VIP: a("10.96.1.0"), Endpoints: []netip.Addr{a("10.64.0.1"), a("10.64.0.2")}},
		{Name: "svc-00001", VIP: a("10.96.1.1"), Endpoints: []netip.Addr{a("10.64.0.3"), a("10.64.0.4")}},
		{Name: "svc-00002", VIP: a("10.96.1.2"), Endpoints: []netip.Addr{a("10.64.0.5"), a("10.64.0.6")}},
	}}
	if diff := cmp.Diff(want, w, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("NewWorkload (-want +got):\n%s", diff)
	}
	// The largest workloads stay inside their ranges.
	big, err := NewWorkload(MaxServices, 10)
	if err != nil {
		t.Fatal(err)
	}
	last := big.Services[MaxServices-1]
	if got := last.VIP.String(); got != "10.96.235.95" {
		t.Errorf("last VIP = %s, want 10.96.235.95", got)
	}
	if e := last.Endpoints[9]; !netip.MustParsePrefix("10.64.0.0/12").Contains(e) {
		t.Errorf("last endpoint %s is outside 10.64.0.0/12", e)
	}
	for _, bad := range [][2]int{{0, 10}, {MaxServices + 1, 1}, {10, 0}, {200000, 10}} {
		if _, err := NewWorkload(bad[0], bad[1]); err == nil {
			t.Errorf("NewWorkload(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

func TestChanges(t *testing.T) {
	w, err := NewWorkload(100, 10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for round := range 5 {
		c := w.NextChange(round)
		if c.Old != w.Services[c.Service].Endpoints[0] {
			t.Fatalf("round %d: old %s is not the service's first endpoint", round, c.Old)
		}
		if seen[c.New] || !netip.MustParsePrefix("10.80.0.0/12").Contains(c.New) {
			t.Fatalf("round %d: new address %s reused or outside 10.80.0.0/12", round, c.New)
		}
		seen[c.New] = true
		w.ApplyChange(c)
		if w.Services[c.Service].Endpoints[0] != c.New {
			t.Fatalf("round %d: change not applied", round)
		}
	}

	c := Change{Service: 1, Old: netip.MustParseAddr("10.64.0.11"), New: netip.MustParseAddr("10.80.0.1")}
	patch := ChangePatch(c, time.Date(2026, 11, 29, 22, 0, 0, 123456789, time.UTC))
	var ops []map[string]any
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch is not JSON: %v\n%s", err, patch)
	}
	want := []map[string]any{
		{"op": "test", "path": "/endpoints/0/addresses/0", "value": "10.64.0.11"},
		{"op": "replace", "path": "/endpoints/0/addresses/0", "value": "10.80.0.1"},
		{"op": "add", "path": "/metadata/annotations", "value": map[string]any{
			"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-29T22:00:00.123456789Z"}},
	}
	if diff := cmp.Diff(want, ops); diff != "" {
		t.Errorf("ChangePatch (-want +got):\n%s", diff)
	}
}

func TestObjects(t *testing.T) {
	w, err := NewWorkload(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	svcs, slices := w.Objects()
	if len(svcs) != 2 || len(slices) != 2 {
		t.Fatalf("got %d Services and %d slices, want 2 and 2", len(svcs), len(slices))
	}
	s, sl := svcs[1], slices[1]
	if s.Spec.ClusterIP != "10.96.1.1" || s.Spec.Ports[0].Port != ServicePort || s.Spec.Ports[0].TargetPort.IntValue() != TargetPort {
		t.Errorf("Service %+v", s.Spec)
	}
	if sl.Name != SliceName(s.Name) || sl.Labels["kubernetes.io/service-name"] != s.Name {
		t.Errorf("slice %s labels %v does not belong to %s", sl.Name, sl.Labels, s.Name)
	}
	var addrs []string
	for _, e := range sl.Endpoints {
		addrs = append(addrs, e.Addresses...)
		if e.Conditions.Ready == nil || !*e.Conditions.Ready {
			t.Errorf("endpoint %v not ready", e.Addresses)
		}
	}
	if diff := cmp.Diff([]string{"10.64.0.4", "10.64.0.5", "10.64.0.6"}, addrs); diff != "" {
		t.Errorf("slice addresses (-want +got):\n%s", diff)
	}
	if *sl.Ports[0].Port != TargetPort {
		t.Errorf("slice port %d, want %d", *sl.Ports[0].Port, TargetPort)
	}
}

const procIPVS = `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A600100:0050 rr
  -> 0A400002:1F90      Masq    1      0          0
  -> 0A400001:1F90      Masq    0      3          1
UDP  [fd00:0010:0096:0000:0000:0000:0000:000a]:0035 rr
  -> [fd00:0010:0244:0000:0000:0000:0000:0002]:0035      Masq    1      0          0
FWM  00000001 wrr
  -> 0A000001:0000      Masq    1      0          0
TCP  0A600101:0050 rr
UDP  0A60000A:0035 rr
  -> 0AF40001:0035      Masq    1      0          0
`

func TestParseProcIPVS(t *testing.T) {
	got, err := ParseProcIPVS(strings.NewReader(procIPVS))
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	want := Table{
		{Protocol: "TCP", Addr: ap("10.96.1.0:80")}:  {ap("10.64.0.2:8080"): 1, ap("10.64.0.1:8080"): 0},
		{Protocol: "TCP", Addr: ap("10.96.1.1:80")}:  {},
		{Protocol: "UDP", Addr: ap("10.96.0.10:53")}: {ap("10.244.0.1:53"): 1},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.AddrPort) bool { return x == y })); diff != "" {
		t.Errorf("ParseProcIPVS (-want +got):\n%s", diff)
	}

	// Every real server line counts, the header's does not.
	if got, want := CountRealServers([]byte(procIPVS)), 5; got != want {
		t.Errorf("CountRealServers = %d, want %d", got, want)
	}
	if got := CountRealServers([]byte(procIPVS[:strings.Index(procIPVS, "TCP  0A600100")])); got != 0 {
		t.Errorf("CountRealServers of the header = %d, want 0", got)
	}

	for _, bad := range []string{
		"h\nh\nh\nTCP  0A6001:0050 rr\n",
		"h\nh\nh\nTCP  0A600100:0050 rr\n  -> 0A400002:1F90 Masq x 0 0\n",
		"h\nh\nh\nTCP\n",
	} {
		if _, err := ParseProcIPVS(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseProcIPVS accepted %q", bad)
		}
	}
}

func TestMissing(t *testing.T) {
	w, err := NewWorkload(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	tests := []struct {
		name  string
		table Table
		want  int
	}{
		{name: "empty", table: Table{}, want: 4},
		{name: "one service complete, one missing a real server", table: Table{
			{Protocol: "TCP", Addr: ap("10.96.1.0:80")}: {ap("10.64.0.1:8080"): 1, ap("10.64.0.2:8080"): 1},
			{Protocol: "TCP", Addr: ap("10.96.1.1:80")}: {ap("10.64.0.3:8080"): 1, ap("10.64.0.9:8080"): 1},
		}, want: 1},
		{name: "wrong protocol and port count as missing", table: Table{
			{Protocol: "UDP", Addr: ap("10.96.1.0:80")}: {ap("10.64.0.1:8080"): 1, ap("10.64.0.2:8080"): 1},
			{Protocol: "TCP", Addr: ap("10.96.1.1:80")}: {ap("10.64.0.3:80"): 1, ap("10.64.0.4:8080"): 1},
		}, want: 3},
		{name: "complete, extra services ignored", table: Table{
			{Protocol: "TCP", Addr: ap("10.96.1.0:80")}:  {ap("10.64.0.1:8080"): 1, ap("10.64.0.2:8080"): 1},
			{Protocol: "TCP", Addr: ap("10.96.1.1:80")}:  {ap("10.64.0.3:8080"): 1, ap("10.64.0.4:8080"): 1},
			{Protocol: "TCP", Addr: ap("10.96.0.1:443")}: {ap("10.0.2.2:6443"): 1},
		}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := w.Missing(tc.table); got != tc.want {
				t.Errorf("Missing = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMetricSum(t *testing.T) {
	const text = `# HELP switchyard_syncs_total Reconcile syncs.
# TYPE switchyard_syncs_total counter
switchyard_syncs_total{mode="full"} 2
switchyard_syncs_total{mode="partial"} 5
switchyard_syncs_total_other 100
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 3
kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"} 9
kubeproxy_sync_proxy_rules_duration_seconds_sum{ip_family="IPv4"} 12.5
weird{path="a}b"} 1e1
switchyard_policy_evaluations_total{policy="p",result="success"} 4
switchyard_policy_evaluations_total{policy="p",result="failure"} 1
switchyard_policy_evaluations_total{policy="builtin:uniform",result="success"} 900
`
	tests := []struct {
		name, label string
		want        float64
		wantFound   bool
	}{
		{name: "switchyard_syncs_total", want: 7, wantFound: true},
		{name: "switchyard_syncs_total", label: `mode="partial"`, want: 5, wantFound: true},
		{name: "kubeproxy_sync_proxy_rules_duration_seconds_count", want: 12, wantFound: true},
		{name: "kubeproxy_sync_proxy_rules_duration_seconds_count", label: `ip_family="IPv4"`, want: 3, wantFound: true},
		{name: "kubeproxy_sync_proxy_rules_duration_seconds_count", label: `ip_family="IPv5"`, want: 0, wantFound: false},
		{name: "weird", want: 10, wantFound: true},
		{name: "switchyard_policy_evaluations_total", label: `policy="p",result="success"`, want: 4, wantFound: true},
		{name: "switchyard_policy_evaluations_total", label: `result="failure", policy="p"`, want: 1, wantFound: true},
		{name: "switchyard_policy_evaluations_total", label: `policy="q",result="success"`, want: 0, wantFound: false},
		{name: "absent", want: 0, wantFound: false},
	}
	for _, tc := range tests {
		got, found, err := MetricSum(strings.NewReader(text), tc.name, tc.label)
		if err != nil || got != tc.want || found != tc.wantFound {
			t.Errorf("MetricSum(%s, %s) = %v, %v, %v; want %v, %v", tc.name, tc.label, got, found, err, tc.want, tc.wantFound)
		}
	}
	for _, bad := range []string{"m{a=\"b\"}\n", "m{a=\"b\" 1\n"} {
		if _, _, err := MetricSum(strings.NewReader(bad), "m", ""); err == nil {
			t.Errorf("MetricSum accepted %q", bad)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime ...
	stat := "42 (kube (proxy)) S 1 42 42 0 -1 4194560 100 200 0 0 150 50 700 100 20 0 9 0 80 0"
	got, err := ParseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 10 * time.Second; got != want {
		t.Errorf("ParseStatCPU = %s, want %s", got, want)
	}
	for _, bad := range []string{"no parens", "1 (x) S 1 2", "1 (x) S 1 42 42 0 -1 0 0 0 0 0 x 0 0 0"} {
		if _, err := ParseStatCPU(bad); err == nil {
			t.Errorf("ParseStatCPU accepted %q", bad)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tkube-proxy\nVmHWM:\t   76800 kB\nVmRSS:\t   71680 kB\nThreads:\t9\n"
	rss, peak, err := ParseStatusMemory(status)
	if err != nil {
		t.Fatal(err)
	}
	if rss != 70<<20 || peak != 75<<20 {
		t.Errorf("ParseStatusMemory = %d, %d; want %d, %d", rss, peak, 70<<20, 75<<20)
	}
	if _, _, err := ParseStatusMemory("Name:\tx\n"); err == nil {
		t.Error("ParseStatusMemory accepted a status without VmRSS")
	}
}

func TestTable(t *testing.T) {
	kpIPVS := Proxy{
		Name: KubeProxy, Complete: 25500 * time.Millisecond, CPUComplete: 20 * time.Second,
		FirstSync: 117800 * time.Millisecond, CPUFirstSync: 111800 * time.Millisecond,
		Changes:      []time.Duration{3 * time.Second, 2850 * time.Millisecond, 2 * time.Second},
		ChangeCPU:    []time.Duration{4 * time.Second, 4 * time.Second, 5 * time.Second},
		RSSFirstSync: 60 << 20, PeakRSSFirstSync: 75 << 20, RSS: 70 << 20, PeakRSS: 75 << 20,
	}
	kpNft := Proxy{
		Name: KubeProxyNftables, Complete: 51 * time.Second, CPUComplete: 40 * time.Second,
		FirstSync: 51 * time.Second, CPUFirstSync: 40 * time.Second,
		Changes:      []time.Duration{400 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond},
		ChangeCPU:    []time.Duration{200 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond},
		RSSFirstSync: 80 << 20, PeakRSSFirstSync: 90 << 20, RSS: 100 << 20, PeakRSS: 110 << 20,
	}
	sy := Proxy{
		Name: Switchyard, Complete: 5100 * time.Millisecond, CPUComplete: 4 * time.Second,
		FirstSync: 5200 * time.Millisecond, CPUFirstSync: 4100 * time.Millisecond,
		Changes:      []time.Duration{15 * time.Millisecond, 25 * time.Millisecond, 20 * time.Millisecond},
		ChangeCPU:    []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 20 * time.Millisecond},
		RSSFirstSync: 40 << 20, PeakRSSFirstSync: 45 << 20, RSS: 40 << 20, PeakRSS: 50 << 20,
	}
	localFirst := sy
	localFirst.Name, localFirst.RSSFirstSync, localFirst.PeakRSSFirstSync, localFirst.RSS, localFirst.PeakRSS = SwitchyardLocalFirst, 50<<20, 60<<20, 80<<20, 80<<20
	floor := Floor{VIPs: 650 * time.Millisecond, Services: 2080 * time.Millisecond, Change: 290 * time.Microsecond}
	header := "kube-proxy (--proxy-mode=ipvs and =nftables) and switchyard (ipvs) side by side: 1000 Services x 10 endpoints, one lab guest (qemu TCG, 1 vCPU)\n" +
		"                                               kp ipvs   kp nftables    switchyard      floor  ipvs/sy   nft/sy sy/floor\n"
	// The three proxies' rows and their samples, shared by the cases
	// where all three ran.
	allThree := `start until table complete                     25.50 s       51.00 s        5.10 s     2.73 s     5.0x    10.0x     1.9x
  CPU by then                                  20.00 s       40.00 s        4.00 s          -     5.0x    10.0x        -
start until first full sync ended             117.80 s       51.00 s        5.20 s          -    22.7x     9.8x        -
  CPU by then                                 111.80 s       40.00 s        4.10 s          -    27.3x     9.8x        -
endpoint change visible (median of 3)           2.85 s      400.0 ms       20.0 ms     290 µs   142.5x    20.0x    69.0x
  CPU per change until its sync ended           4.00 s      200.0 ms       20.0 ms          -   200.0x    10.0x        -
RSS after the first full sync (peak)       60 (75) MiB   80 (90) MiB   40 (45) MiB          -     1.5x     2.0x        -
RSS at the end (peak)                      70 (75) MiB 100 (110) MiB   40 (50) MiB          -     1.8x     2.5x        -
floor (cloudflare/ipvs loop): VIPs bound in 650.0 ms, services and real servers in 2.08 s
`
	samples := `kube-proxy endpoint changes: 3.00 s, 2.85 s, 2.00 s
kube-proxy-nftables endpoint changes: 400.0 ms, 300.0 ms, 500.0 ms
switchyard endpoint changes: 15.0 ms, 25.0 ms, 20.0 ms
`
	tests := []struct {
		name    string
		proxies []Proxy
		want    string
	}{
		{name: "all three", proxies: []Proxy{kpIPVS, kpNft, sy}, want: header + allThree + samples},
		{name: "nftables failed, switchyard did not run", proxies: []Proxy{kpIPVS, {Name: KubeProxyNftables, Err: "nftables table never complete"}},
			want: header + `start until table complete                     25.50 s             -             -     2.73 s        -        -        -
  CPU by then                                  20.00 s             -             -          -        -        -        -
start until first full sync ended             117.80 s             -             -          -        -        -        -
  CPU by then                                 111.80 s             -             -          -        -        -        -
endpoint change visible (median of 3)           2.85 s             -             -     290 µs        -        -        -
  CPU per change until its sync ended           4.00 s             -             -          -        -        -        -
RSS after the first full sync (peak)       60 (75) MiB             -             -          -        -        -        -
RSS at the end (peak)                      70 (75) MiB             -             -          -        -        -        -
floor (cloudflare/ipvs loop): VIPs bound in 650.0 ms, services and real servers in 2.08 s
kube-proxy endpoint changes: 3.00 s, 2.85 s, 2.00 s
kube-proxy-nftables: nftables table never complete
switchyard: did not run
`},
		{name: "nftables given up waiting for its table", proxies: []Proxy{kpIPVS, {Name: KubeProxyNftables, GaveUp: 30 * time.Minute, CPUGaveUp: 1700 * time.Second,
			RSS: 300 << 20, PeakRSS: 310 << 20, Err: "nftables table never complete: timed out"}, sy},
			want: header + `start until table complete                     25.50 s     >30.0 min        5.10 s     2.73 s     5.0x  >352.9x     1.9x
  CPU by then                                  20.00 s     >28.3 min        4.00 s          -     5.0x  >425.0x        -
start until first full sync ended             117.80 s             -        5.20 s          -    22.7x        -        -
  CPU by then                                 111.80 s             -        4.10 s          -    27.3x        -        -
endpoint change visible (median of 3)           2.85 s             -       20.0 ms     290 µs   142.5x        -    69.0x
  CPU per change until its sync ended           4.00 s             -       20.0 ms          -   200.0x        -        -
RSS after the first full sync (peak)       60 (75) MiB             -   40 (45) MiB          -     1.5x        -        -
RSS at the end (peak)                      70 (75) MiB 300 (310) MiB   40 (50) MiB          -     1.8x     7.5x        -
floor (cloudflare/ipvs loop): VIPs bound in 650.0 ms, services and real servers in 2.08 s
kube-proxy endpoint changes: 3.00 s, 2.85 s, 2.00 s
switchyard endpoint changes: 15.0 ms, 25.0 ms, 20.0 ms
kube-proxy-nftables: nftables table never complete: timed out
`},
		{name: "IPVS given up waiting for its first sync", proxies: []Proxy{{Name: KubeProxy, Complete: 25500 * time.Millisecond, CPUComplete: 20 * time.Second,
			GaveUp: 40 * time.Minute, CPUGaveUp: 39 * time.Minute, RSS: 90 << 20, PeakRSS: 95 << 20, Err: "no sync ended: timed out"}, kpNft, sy},
			want: header + `start until table complete                     25.50 s       51.00 s        5.10 s     2.73 s     5.0x    10.0x     1.9x
  CPU by then                                  20.00 s       40.00 s        4.00 s          -     5.0x    10.0x        -
start until first full sync ended            >40.0 min       51.00 s        5.20 s          -  >461.5x     9.8x        -
  CPU by then                                >39.0 min       40.00 s        4.10 s          -  >570.7x     9.8x        -
endpoint change visible (median of 3)                -      400.0 ms       20.0 ms     290 µs        -    20.0x    69.0x
  CPU per change until its sync ended                -      200.0 ms       20.0 ms          -        -    10.0x        -
RSS after the first full sync (peak)                 -   80 (90) MiB   40 (45) MiB          -        -     2.0x        -
RSS at the end (peak)                      90 (95) MiB 100 (110) MiB   40 (50) MiB          -     2.2x     2.5x        -
floor (cloudflare/ipvs loop): VIPs bound in 650.0 ms, services and real servers in 2.08 s
kube-proxy-nftables endpoint changes: 400.0 ms, 300.0 ms, 500.0 ms
switchyard endpoint changes: 15.0 ms, 25.0 ms, 20.0 ms
kube-proxy: no sync ended: timed out
`},
		{name: "policy parts", proxies: []Proxy{kpIPVS, kpNft, sy, localFirst, {Name: SwitchyardWasm, Err: "policy kpbench-wasm: 0 successful evaluations"}},
			want: header + allThree + `switchyard by policy: none (the default; builtin:uniform evaluated), builtin:local-first on every Service, WebAssembly policy kpbench-wasm on 100 Services
                                             no policy   local-first     wasm x100
start until table complete                      5.10 s        5.10 s             -
  CPU by then                                   4.00 s        4.00 s             -
start until first full sync ended               5.20 s        5.20 s             -
  CPU by then                                   4.10 s        4.10 s             -
endpoint change visible (median)               20.0 ms       20.0 ms             -
  CPU per change until its sync ended          20.0 ms       20.0 ms             -
RSS after the first full sync (peak)       40 (45) MiB   50 (60) MiB             -
RSS at the end (peak)                      40 (50) MiB   80 (80) MiB             -
kp ipvs RSS / this (first sync, end)        1.5x, 1.8x    1.2x, 0.9x             -
kp nftables RSS / this (first sync, end)    2.0x, 2.5x    1.6x, 1.2x             -
` + samples + `switchyard-local-first endpoint changes: 15.0 ms, 25.0 ms, 20.0 ms
switchyard-wasm: policy kpbench-wasm: 0 successful evaluations
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Result{Services: 1000, PerService: 10, Floor: floor, Proxies: tc.proxies}
			if diff := cmp.Diff(tc.want, r.Table()); diff != "" {
				t.Errorf("Table (-want +got):\n%s", diff)
			}
		})
	}
}

package kpbench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// ResultMarker starts the guest's output line carrying the Result as JSON.
const ResultMarker = "KPBENCH_RESULT "

// ProfileMarker starts the guest's output line carrying switchyard's CPU
// profile in base64 (KPBENCH_PROFILE).
const ProfileMarker = "KPBENCH_PROFILE "

// HeapMarker starts the guest's output line carrying switchyard's heap
// profile in base64 (KPBENCH_HEAP), taken when its first full sync ended.
const HeapMarker = "KPBENCH_HEAP "

// The proxies, by the names results carry (and KPBENCH_ONLY takes).
const (
	KubeProxy         = "kube-proxy" // --proxy-mode=ipvs
	KubeProxyNftables = "kube-proxy-nftables"
	Switchyard        = "switchyard"
	// SwitchyardLocalFirst is switchyard with LocalFirstPolicy on every
	// Service, SwitchyardWasm with WasmPolicy on WasmServices Services
	// (policy.go); their column is in the table's policy block.
	SwitchyardLocalFirst = "switchyard-local-first"
	SwitchyardWasm       = "switchyard-wasm"
	// SwitchyardBase is a second switchyard binary (another revision,
	// KPBENCH_SWITCHYARD_BASE), measured as switchyard is, so that a
	// change is compared before and after in one boot, alternated
	// (KPBENCH_ONLY=floor,switchyard-base,switchyard,switchyard-base,switchyard).
	// It has no column of the table: its lines and samples are printed.
	SwitchyardBase = "switchyard-base"
)

// DefaultOnly is the measurements run when KPBENCH_ONLY is empty, in this
// order.
const DefaultOnly = "floor,kube-proxy,kube-proxy-nftables,switchyard,switchyard-local-first,switchyard-wasm"

// Result is one benchmark run in one guest boot.
type Result struct {
	Services   int
	PerService int
	Floor      Floor
	Proxies    []Proxy // in the order they ran
	// Switch is the node switching from kube-proxy to switchyard and
	// back (-only switch), nil when not measured.
	Switch *Switch `json:",omitempty"`
}

// Switch is a node switching proxies with switchyard's cleanup flags:
// kube-proxy (IPVS mode) programs the workload and stops, switchyard
// --cleanup-kube-proxy runs, the daemon programs it, stops, and switchyard
// --cleanup runs.
type Switch struct {
	// CleanupKubeProxy and CleanupSwitchyard are how long each cleanup
	// command ran.
	CleanupKubeProxy, CleanupSwitchyard time.Duration
	// Outage is from the start of --cleanup-kube-proxy, which deletes
	// kube-proxy's virtual services, until the daemon's IPVS table held
	// every real server again: the time without service.
	Outage time.Duration
	// KubeProxyLeft and SwitchyardLeft are what each cleanup left of its
	// proxy's objects (empty when it removed everything).
	KubeProxyLeft, SwitchyardLeft []string
}

// Floor is a plain loop over the kernel interfaces creating the same
// objects: the least any proxy can spend.
type Floor struct {
	VIPs     time.Duration // binding every ClusterIP to a dummy link
	Services time.Duration // the virtual services and their real servers
	Change   time.Duration // one endpoint replaced (add + delete), median
}

// Proxy is what one proxy took, measured from its start.
type Proxy struct {
	Name         string
	Complete     time.Duration // until the kernel's table held every endpoint
	CPUComplete  time.Duration // its CPU (with waited-for children) by then
	FirstSync    time.Duration // until its metrics showed a first sync ended
	CPUFirstSync time.Duration
	Changes      []time.Duration // each endpoint change: API patch to visible in the kernel
	ChangeCPU    []time.Duration // CPU from each patch until its sync ended
	// RSSFirstSync and PeakRSSFirstSync are VmRSS and VmHWM in bytes
	// two seconds after the first full sync had ended (kpguest's
	// rssSettle; until 2026-12-07, session 12, at once); RSS and PeakRSS
	// at the end.
	RSSFirstSync, PeakRSSFirstSync int64
	RSS, PeakRSS                   int64
	// GaveUp and CPUGaveUp are set when the run was given up waiting
	// for a complete table (kpguest -complete-timeout; Complete unset) or
	// for its first sync to end (-sync-timeout; Complete set): how long
	// the proxy had run then and its CPU, what the awaited times are
	// more than.
	GaveUp, CPUGaveUp time.Duration `json:",omitempty"`
	Err               string        // why the run stopped early, if it did
}

// bound is a measured duration, or, with atLeast, a lower bound of one
// (the run was given up before it ended).
type bound struct {
	d       time.Duration
	atLeast bool
}

// awaited is measured, or, when it is unset and the run was given up
// waiting for it, how long the run had gone then: a lower bound.
func awaited(measured, gaveUp time.Duration, waiting bool) bound {
	if measured <= 0 && waiting && gaveUp > 0 {
		return bound{gaveUp, true}
	}
	return bound{d: measured}
}

// complete and firstSync are how long p took to a complete table and
// until its first sync ended, or at least took; the cpu ones its CPU by
// then. A run given up with its table complete waited for its first sync.
func (p *Proxy) complete() bound    { return awaited(p.Complete, p.GaveUp, true) }
func (p *Proxy) cpuComplete() bound { return awaited(p.CPUComplete, p.CPUGaveUp, true) }
func (p *Proxy) firstSync() bound   { return awaited(p.FirstSync, p.GaveUp, p.Complete > 0) }
func (p *Proxy) cpuFirstSync() bound {
	return awaited(p.CPUFirstSync, p.CPUGaveUp, p.Complete > 0)
}

func (b bound) String() string {
	if b.atLeast && b.d > 0 {
		return ">" + dur(b.d)
	}
	return dur(b.d)
}

// boundRatio is a over b; a lower bound over a measure is a lower bound
// of the ratio, a measure over a lower bound an upper one.
func boundRatio(a, b bound) string {
	r := ratio(a.d, b.d)
	switch {
	case r == "-" || (a.atLeast && b.atLeast):
		return "-"
	case a.atLeast:
		return ">" + r
	case b.atLeast:
		return "<" + r
	}
	return r
}

// MedianChange is the median time for an endpoint change to show in IPVS.
func (p *Proxy) MedianChange() time.Duration { return Median(p.Changes) }

func (p *Proxy) medianChangeCPU() time.Duration { return Median(p.ChangeCPU) }

// Median returns the middle duration (the upper one of an even count), 0
// for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Proxy returns the named proxy's results; one that did not run has Err
// set.
func (r Result) Proxy(name string) *Proxy {
	for i := range r.Proxies {
		if r.Proxies[i].Name == name {
			return &r.Proxies[i]
		}
	}
	return &Proxy{Name: name, Err: "did not run"}
}

// Table renders r for people: both kube-proxy modes, switchyard and the
// floor side by side, with each kube-proxy's ratio to switchyard and
// switchyard's to the floor, then the endpoint change samples.
func (r Result) Table() string {
	ki, kn, sy := r.Proxy(KubeProxy), r.Proxy(KubeProxyNftables), r.Proxy(Switchyard)
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy (--proxy-mode=ipvs and =nftables) and switchyard (ipvs) side by side: %d Services x %d endpoints, one lab guest (qemu TCG, 1 vCPU)\n",
		r.Services, r.PerService)
	row := func(label string, cols ...string) {
		fmt.Fprintf(&b, "%-40s %13s %13s %13s %10s %8s %8s %8s\n", append([]any{label}, anys(cols)...)...)
	}
	// durs is one row of durations: the three proxies' values, the floor's
	// (0 for none) and the ratios.
	bounds := func(label string, get func(*Proxy) bound, floor time.Duration) {
		syv := get(sy)
		syFloor := "-"
		if floor > 0 {
			syFloor = boundRatio(syv, bound{d: floor})
		}
		row(label, get(ki).String(), get(kn).String(), syv.String(), dur(floor),
			boundRatio(get(ki), syv), boundRatio(get(kn), syv), syFloor)
	}
	durs := func(label string, get func(*Proxy) time.Duration, floor time.Duration) {
		bounds(label, func(p *Proxy) bound { return bound{d: get(p)} }, floor)
	}
	mems := func(label string, get func(*Proxy) (int64, int64)) {
		ir, ip := get(ki)
		nr, np := get(kn)
		sr, sp := get(sy)
		row(label, mem(ir, ip), mem(nr, np), mem(sr, sp), "-", memRatio(ir, sr), memRatio(nr, sr), "-")
	}
	row("", "kp ipvs", "kp nftables", "switchyard", "floor", "ipvs/sy", "nft/sy", "sy/floor")
	bounds("start until table complete", (*Proxy).complete, r.Floor.VIPs+r.Floor.Services)
	bounds("  CPU by then", (*Proxy).cpuComplete, 0)
	bounds("start until first full sync ended", (*Proxy).firstSync, 0)
	bounds("  CPU by then", (*Proxy).cpuFirstSync, 0)
	n := max(len(ki.Changes), len(kn.Changes), len(sy.Changes))
	durs(fmt.Sprintf("endpoint change visible (median of %d)", n), (*Proxy).MedianChange, r.Floor.Change)
	durs("  CPU per change until its sync ended", (*Proxy).medianChangeCPU, 0)
	mems("RSS after the first full sync (peak)", func(p *Proxy) (int64, int64) { return p.RSSFirstSync, p.PeakRSSFirstSync })
	mems("RSS at the end (peak)", func(p *Proxy) (int64, int64) { return p.RSS, p.PeakRSS })
	fmt.Fprintf(&b, "floor (cloudflare/ipvs loop): VIPs bound in %s, services and real servers in %s\n", dur(r.Floor.VIPs), dur(r.Floor.Services))
	parts := r.policyBlock(&b, ki, kn)
	for _, p := range append([]*Proxy{ki, kn, sy}, parts...) {
		if len(p.Changes) > 0 {
			s := make([]string, len(p.Changes))
			for i, c := range p.Changes {
				s[i] = dur(c)
			}
			fmt.Fprintf(&b, "%s endpoint changes: %s\n", p.Name, strings.Join(s, ", "))
		}
	}
	for _, p := range append([]*Proxy{ki, kn, sy}, parts...) {
		if p.Err != "" {
			fmt.Fprintf(&b, "%s: %s\n", p.Name, p.Err)
		}
	}
	return b.String()
}

// policyBlock renders, when a switchyard policy part ran
// (SwitchyardLocalFirst, SwitchyardWasm), switchyard's runs side by side
// by policy, with each kube-proxy's RSS against each, and returns those
// parts.
func (r Result) policyBlock(b *strings.Builder, ki, kn *Proxy) []*Proxy {
	var cols []*Proxy
	var headers []string
	for _, part := range PolicyParts {
		p := r.Proxy(part.Name)
		if part.Name != Switchyard && p.Err == "did not run" {
			continue
		}
		cols = append(cols, p)
		headers = append(headers, part.Header)
	}
	if len(cols) < 2 {
		return nil
	}
	fmt.Fprintf(b, "switchyard by policy: none (the default; builtin:uniform evaluated), %s on every Service, WebAssembly policy %s on %d Services\n",
		LocalFirstPolicy, WasmPolicy, min(WasmServices, r.Services))
	row := func(label string, get func(*Proxy) string) {
		fmt.Fprintf(b, "%-40s", label)
		for _, p := range cols {
			fmt.Fprintf(b, " %13s", get(p))
		}
		b.WriteString("\n")
	}
	row("", func(p *Proxy) string { return headers[slices.Index(cols, p)] })
	durs := func(label string, get func(*Proxy) time.Duration) {
		row(label, func(p *Proxy) string { return dur(get(p)) })
	}
	row("start until table complete", func(p *Proxy) string { return p.complete().String() })
	row("  CPU by then", func(p *Proxy) string { return p.cpuComplete().String() })
	row("start until first full sync ended", func(p *Proxy) string { return p.firstSync().String() })
	row("  CPU by then", func(p *Proxy) string { return p.cpuFirstSync().String() })
	durs("endpoint change visible (median)", (*Proxy).MedianChange)
	durs("  CPU per change until its sync ended", (*Proxy).medianChangeCPU)
	row("RSS after the first full sync (peak)", func(p *Proxy) string { return mem(p.RSSFirstSync, p.PeakRSSFirstSync) })
	row("RSS at the end (peak)", func(p *Proxy) string { return mem(p.RSS, p.PeakRSS) })
	// Each kube-proxy's RSS over this one's, after the first sync and
	// at the end: above 1.0x, switchyard uses less.
	for _, k := range []struct {
		label string
		p     *Proxy
	}{{"kp ipvs RSS / this (first sync, end)", ki}, {"kp nftables RSS / this (first sync, end)", kn}} {
		row(k.label, func(p *Proxy) string {
			first, end := memRatio(k.p.RSSFirstSync, p.RSSFirstSync), memRatio(k.p.RSS, p.RSS)
			if first == "-" && end == "-" {
				return "-"
			}
			return first + ", " + end
		})
	}
	return cols[1:]
}

func anys(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}

func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d >= 10*time.Minute:
		return fmt.Sprintf("%.1f min", d.Minutes())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func ratio(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", float64(a)/float64(b))
}

func memRatio(a, b int64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", float64(a)/float64(b))
}

func mem(rss, peak int64) string {
	if rss <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%d) MiB", rss>>20, peak>>20)
}

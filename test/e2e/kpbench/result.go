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

// The proxies, by the names results carry.
const (
	KubeProxy  = "kube-proxy"
	Switchyard = "switchyard"
)

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
	Complete     time.Duration // until IPVS held every real server
	CPUComplete  time.Duration // its CPU (with waited-for children) by then
	FirstSync    time.Duration // until its metrics showed a first sync ended
	CPUFirstSync time.Duration
	Changes      []time.Duration // each endpoint change: API patch to visible in IPVS
	ChangeCPU    []time.Duration // CPU from each patch until its sync ended
	RSS, PeakRSS int64           // bytes, at the end
	Err          string          // why the run stopped early, if it did
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

// Table renders r for people: kube-proxy, switchyard and the floor side by
// side, with kube-proxy/switchyard and switchyard/floor ratios.
func (r Result) Table() string {
	kp, sy := r.Proxy(KubeProxy), r.Proxy(Switchyard)
	var b strings.Builder
	fmt.Fprintf(&b, "kube-proxy --proxy-mode=ipvs and switchyard (ipvs) side by side: %d Services x %d endpoints, one lab guest (qemu TCG, 1 vCPU)\n",
		r.Services, r.PerService)
	row := func(label, kpv, syv, floor, r1, r2 string) {
		fmt.Fprintf(&b, "%-40s %12s %12s %12s %10s %10s\n", label, kpv, syv, floor, r1, r2)
	}
	row("", "kube-proxy", "switchyard", "floor", "kp/sy", "sy/floor")
	floorTotal := r.Floor.VIPs + r.Floor.Services
	row("start until IPVS complete", dur(kp.Complete), dur(sy.Complete), dur(floorTotal),
		ratio(kp.Complete, sy.Complete), ratio(sy.Complete, floorTotal))
	row("  CPU by then", dur(kp.CPUComplete), dur(sy.CPUComplete), "-", ratio(kp.CPUComplete, sy.CPUComplete), "-")
	row("start until first full sync ended", dur(kp.FirstSync), dur(sy.FirstSync), "-", ratio(kp.FirstSync, sy.FirstSync), "-")
	row("  CPU by then", dur(kp.CPUFirstSync), dur(sy.CPUFirstSync), "-", ratio(kp.CPUFirstSync, sy.CPUFirstSync), "-")
	label := fmt.Sprintf("endpoint change visible (median of %d)", max(len(kp.Changes), len(sy.Changes)))
	row(label, dur(kp.MedianChange()), dur(sy.MedianChange()), dur(r.Floor.Change),
		ratio(kp.MedianChange(), sy.MedianChange()), ratio(sy.MedianChange(), r.Floor.Change))
	row("  CPU per change until its sync ended", dur(kp.medianChangeCPU()), dur(sy.medianChangeCPU()), "-",
		ratio(kp.medianChangeCPU(), sy.medianChangeCPU()), "-")
	row("RSS at the end (peak)", mem(kp.RSS, kp.PeakRSS), mem(sy.RSS, sy.PeakRSS), "-", "-", "-")
	fmt.Fprintf(&b, "floor: VIPs bound in %s, services and real servers in %s\n", dur(r.Floor.VIPs), dur(r.Floor.Services))
	for _, p := range []*Proxy{kp, sy} {
		if p.Err != "" {
			fmt.Fprintf(&b, "%s: %s\n", p.Name, p.Err)
		}
	}
	return b.String()
}

func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
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

func mem(rss, peak int64) string {
	if rss <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%d) MiB", rss>>20, peak>>20)
}

//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/e2e/kpbench"
	"github.com/switchyard-lb/switchyard/test/lab/guest"
)

type options struct {
	services, perService, changes int
	kubeconfig                    string
	kubeProxy, switchyard         string
	switchyardBase                string
	switchyardConfig              string
	switchyardArgs                string
	switchyardHeap                bool
	switchyardProfile             time.Duration
	profileChanges                bool
	only                          string
	completeTimeout, syncTimeout  time.Duration
	changeTimeout                 time.Duration
	completePoll                  time.Duration
	logTail                       int
	resync                        bool
	policyModule                  string
}

func main() {
	var o options
	flag.IntVar(&o.services, "services", 1000, "Services in the workload")
	flag.IntVar(&o.perService, "endpoints", 10, "endpoints per Service")
	flag.IntVar(&o.changes, "changes", 5, "endpoint changes measured per proxy")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "testdata/kubeconfig", "kubeconfig reaching the host's API server")
	flag.StringVar(&o.kubeProxy, "kube-proxy", "", "kube-proxy binary (static)")
	flag.StringVar(&o.switchyard, "switchyard", "", "switchyard binary (static)")
	flag.StringVar(&o.switchyardBase, "switchyard-base", "", "a second switchyard binary (static), measured as switchyard-base")
	flag.StringVar(&o.switchyardConfig, "switchyard-config", "testdata/switchyard.yaml", "switchyard configuration")
	flag.StringVar(&o.switchyardArgs, "switchyard-args", "", "extra switchyard flags, space-separated (such as --v=4)")
	flag.BoolVar(&o.switchyardHeap, "switchyard-heap", false, "print switchyard's heap profile when its first full sync ended")
	flag.DurationVar(&o.switchyardProfile, "switchyard-profile", 0, "when set, profile switchyard's CPU for this long from its start (--profiling) and print the profile in base64")
	flag.BoolVar(&o.profileChanges, "profile-changes", false, "start -switchyard-profile when the first full sync has ended, so that it holds the endpoint changes rather than the start")
	flag.StringVar(&o.only, "only", kpbench.DefaultOnly, "which measurements to run, in this order")
	flag.DurationVar(&o.completeTimeout, "complete-timeout", 30*time.Minute, "how long a proxy may take to program the whole table")
	flag.DurationVar(&o.syncTimeout, "sync-timeout", 40*time.Minute, "how long a proxy may take to end its first full sync")
	flag.DurationVar(&o.changeTimeout, "change-timeout", 5*time.Minute, "how long one endpoint change may take to show and its sync to end")
	flag.DurationVar(&o.completePoll, "complete-poll", 100*time.Millisecond, "how often to read the kernel's table (/proc/net/ip_vs, nft list) until it is complete, at most (reads are spaced 4 times their cost)")
	flag.IntVar(&o.logTail, "log-tail", 0, "print the last this many bytes of each proxy's log after its run")
	flag.BoolVar(&o.resync, "resync", false, "after the changes, measure switchyard's CPU over one syncPeriod holding a periodic full resync")
	flag.StringVar(&o.policyModule, "policy-module", "testdata/"+kpbench.PolicyModuleGzip, "the gzipped WebAssembly policy module of "+kpbench.SwitchyardWasm)
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Printf("kpguest: %v\n", err)
		os.Exit(1)
	}
}

func run(o options, out io.Writer) error {
	w, err := kpbench.NewWorkload(o.services, o.perService)
	if err != nil {
		return err
	}
	if err := guest.ConfigureUserNet(); err != nil {
		return err
	}
	k, err := ipvs.NewNetlink()
	if err != nil {
		return fmt.Errorf("open IPVS netlink: %w", err)
	}
	defer func() { k.Close() }() // the last one: resetIPVS reopens it
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", o.kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	res := kpbench.Result{Services: o.services, PerService: o.perService}
	b := bench{o: o, w: w, k: k, client: client, out: out}
	round := 0
	for _, what := range strings.Split(o.only, ",") {
		switch what {
		case "floor":
			if res.Floor, err = b.floor(); err != nil {
				return fmt.Errorf("floor: %w", err)
			}
			fmt.Fprintf(out, "== floor: VIPs %s, services %s, change %s\n", res.Floor.VIPs, res.Floor.Services, res.Floor.Change)
		case kpbench.KubeProxy:
			p := b.proxy(kpbench.KubeProxy, o.kubeProxy, kubeProxyArgs(o, "ipvs"), kubeProxySyncs, ipvsView{b: &b}, &round)
			res.Proxies = append(res.Proxies, p)
		case kpbench.KubeProxyNftables:
			// Single-stack, as in IPVS mode (GuestTools): the nft CLI
			// serves both families, so kube-proxy would also run an
			// IPv6 proxier unless the kernel's IPv6 is disabled.
			restore, err := disableIPv6()
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			p := b.proxy(kpbench.KubeProxyNftables, o.kubeProxy, kubeProxyArgs(o, "nftables"), kubeProxySyncs, &nftView{}, &round)
			res.Proxies = append(res.Proxies, p)
			if err := restore(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		case kpbench.Switchyard, kpbench.SwitchyardBase:
			args := switchyardArgs(o)
			if (o.switchyardProfile > 0 || o.switchyardHeap) && what == kpbench.Switchyard {
				args = append(args, "--profiling")
			}
			bin := o.switchyard
			if what == kpbench.SwitchyardBase {
				bin = o.switchyardBase
			}
			p := b.proxy(what, bin, args, switchyardSyncs, ipvsView{b: &b}, &round)
			res.Proxies = append(res.Proxies, p)
		case kpbench.SwitchyardLocalFirst:
			cfg := "/tmp/" + what + ".yaml"
			if err := os.WriteFile(cfg, []byte(kpbench.SwitchyardLocalFirstConfig), 0o644); err != nil {
				return err
			}
			o := o
			o.switchyardConfig = cfg
			p := b.proxy(what, o.switchyard, switchyardArgs(o), policySyncs(kpbench.LocalFirstPolicy, o.services), ipvsView{b: &b}, &round)
			res.Proxies = append(res.Proxies, p)
		case kpbench.SwitchyardWasm:
			n := min(kpbench.WasmServices, o.services)
			undo, err := b.wasmPolicy(n)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			p := b.proxy(what, o.switchyard, switchyardArgs(o), policySyncs(kpbench.WasmPolicy, n), ipvsView{b: &b}, &round)
			res.Proxies = append(res.Proxies, p)
			if err := undo(); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		case "switch":
			sw, err := b.switchProxies()
			if err != nil {
				return fmt.Errorf("switch: %w", err)
			}
			res.Switch = &sw
			fmt.Fprintf(out, "== switch: --cleanup-kube-proxy %s, outage %s, --cleanup %s; left of kube-proxy %q, of switchyard %q\n",
				sw.CleanupKubeProxy.Round(time.Millisecond), sw.Outage.Round(time.Millisecond),
				sw.CleanupSwitchyard.Round(time.Millisecond), sw.KubeProxyLeft, sw.SwitchyardLeft)
		default:
			return fmt.Errorf("-only: unknown measurement %q", what)
		}
		if err := cleanKernel(k); err != nil {
			return fmt.Errorf("clean after %s: %w", what, err)
		}
		// The compiled policies and their last good versions
		// (policies.cacheDir's default): the next run starts cold.
		if err := os.RemoveAll(policyCacheDir); err != nil {
			return fmt.Errorf("clean after %s: %w", what, err)
		}
		// The IPVS family is registered again, maybe under a new id.
		k.Close()
		if err := resetIPVS(); err != nil {
			return fmt.Errorf("clean after %s: %w", what, err)
		}
		if k, err = ipvs.NewNetlink(); err != nil {
			return fmt.Errorf("open IPVS netlink: %w", err)
		}
		b.k = k
	}
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s%s\n", kpbench.ResultMarker, data)
	return nil
}

// kubeProxyArgs are kube-proxy's flags in mode (ipvs or nftables).
func kubeProxyArgs(o options, mode string) []string {
	return []string{"--proxy-mode=" + mode, "--kubeconfig=" + o.kubeconfig, "--hostname-override=" + kpbench.NodeName,
		"--cluster-cidr=" + kpbench.ClusterCIDR, "--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address=127.0.0.1:10256", "--conntrack-max-per-core=0", "--v=1"}
}

// kubeProxySyncs counts kube-proxy's IPv4 syncs (dual-stack: the IPv6
// proxier's syncs count too, unless filtered out).
var kubeProxySyncs = syncMetric{name: "kubeproxy_sync_proxy_rules_duration_seconds_count", label: `ip_family="IPv4"`,
	diag: []string{"kubeproxy_sync_proxy_rules_duration_seconds_sum", "kubeproxy_sync_proxy_rules_duration_seconds_count"}}

func switchyardArgs(o options) []string {
	args := []string{"--config=" + o.switchyardConfig, "--kubeconfig=" + o.kubeconfig, "--hostname-override=" + kpbench.NodeName}
	return append(args, strings.Fields(o.switchyardArgs)...)
}

// policyCacheDir holds what switchyard keeps of its WebAssembly policies
// across restarts (policies.cacheDir, default /var/cache/switchyard/wasm).
const policyCacheDir = "/var/cache/switchyard"

// policySyncs is switchyardSyncs for a run with a balancing policy: the
// run fails unless policy evaluated services Services successfully and
// never failed (a policy that did not load would measure the fallback).
func policySyncs(policy string, services int) syncMetric {
	m := switchyardSyncs
	m.policy, m.policyServices = policy, services
	return m
}

// wasmPolicy gives the first n Services the WebAssembly policy of
// -policy-module, through a policy ConfigMap and the Services'
// annotation, and returns what takes both away again.
func (b *bench) wasmPolicy(n int) (undo func() error, err error) {
	module, err := os.ReadFile(b.o.policyModule)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cms := b.client.CoreV1().ConfigMaps(kpbench.PolicyNamespace)
	if _, err := cms.Create(ctx, kpbench.PolicyConfigMap(module), metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the policy ConfigMap: %w", err)
	}
	annotate := func(ctx context.Context, policy string) error {
		for _, s := range b.w.Services[:n] {
			if _, err := b.client.CoreV1().Services(kpbench.Namespace).Patch(ctx, s.Name, types.MergePatchType,
				kpbench.PolicyPatch(policy), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("annotate Service %s: %w", s.Name, err)
			}
		}
		return nil
	}
	began := time.Now()
	if err := annotate(ctx, kpbench.WasmPolicy); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "== policy ConfigMap %s/%s (%d KiB gzipped) on %d Services, annotated in %s\n", kpbench.PolicyNamespace,
		kpbench.WasmPolicy, len(module)>>10, n, time.Since(began).Round(time.Millisecond))
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := annotate(ctx, ""); err != nil {
			return err
		}
		if err := cms.Delete(ctx, kpbench.WasmPolicy, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete the policy ConfigMap: %w", err)
		}
		return nil
	}, nil
}

// switchyardSyncs counts switchyard's ended syncs: its sync duration's
// observations, made as a sync ends. (switchyard_syncs_total counts a sync
// before its dataplane apply: read as "ended", it let the first change
// start while the first full sync still wrote its nftables table.)
// Its diagnostics name the policies evaluated (builtin:uniform without
// one) and their failures.
var switchyardSyncs = syncMetric{name: "switchyard_sync_duration_seconds_count",
	diag: []string{"switchyard_syncs_total", "switchyard_sync_duration_seconds_sum", "switchyard_sync_duration_seconds_count",
		"switchyard_policy_evaluations_total", "switchyard_policy_failures_total"}}

type bench struct {
	o      options
	w      kpbench.Workload
	k      *ipvs.Netlink
	client kubernetes.Interface
	out    io.Writer
	// warm is set once the API server has answered a dry-run PATCH of an
	// EndpointSlice (warmUp).
	warm bool
}

// warmUp sends the API server, once per boot, a dry-run of the first
// endpoint change: its first PATCH of an EndpointSlice took 140-170 ms to
// answer in every 10,000- and 50,000-Service run (the others 7-40 ms),
// charged to whichever proxy's first change came first. A dry run goes
// through the same admission and field management and reaches no
// watcher.
func (b *bench) warmUp(c kpbench.Change) error {
	if b.warm {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err := b.client.DiscoveryV1().EndpointSlices(kpbench.Namespace).Patch(ctx,
		kpbench.SliceName(b.w.Services[c.Service].Name), types.JSONPatchType,
		kpbench.ChangePatch(c, began), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run patch of an endpoint slice: %w", err)
	}
	b.warm = true
	fmt.Fprintf(b.out, "== the API server's first EndpointSlice PATCH (a dry run, before any change): answered after %s\n",
		time.Since(began).Round(100*time.Microsecond))
	return nil
}

func vsKey(vip netip.Addr) model.VirtualServiceKey {
	return model.VirtualServiceKey{Addr: vip, Port: kpbench.ServicePort, Protocol: model.TCP}
}

func dest(a netip.Addr) ipvs.Destination {
	return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: a, Port: kpbench.TargetPort}, Weight: 1}
}

// floorDummy holds the floor's VIPs, as kube-ipvs0 and switchyard0 hold
// the proxies'.
const floorDummy = "kpbench0"

// floor creates the workload's objects in a plain loop, then replaces one
// endpoint a few times (add the new real server, delete the old).
func (b *bench) floor() (kpbench.Floor, error) {
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		return kpbench.Floor{}, err
	}
	defer a.Close()
	if err := a.EnsureDummy(floorDummy); err != nil {
		return kpbench.Floor{}, err
	}
	var f kpbench.Floor
	start := time.Now()
	for _, s := range b.w.Services {
		if err := a.AddAddr(floorDummy, s.VIP); err != nil {
			return f, err
		}
	}
	f.VIPs = time.Since(start)
	start = time.Now()
	for _, s := range b.w.Services {
		if err := b.k.AddService(ipvs.Service{VirtualServiceKey: vsKey(s.VIP), Scheduler: "rr"}); err != nil {
			return f, err
		}
		for _, e := range s.Endpoints {
			if err := b.k.AddDestination(vsKey(s.VIP), dest(e)); err != nil {
				return f, err
			}
		}
	}
	f.Services = time.Since(start)
	var changes []time.Duration
	s := b.w.Services[0]
	old, repl := s.Endpoints[0], netip.MustParseAddr("10.95.255.254")
	for range 5 {
		start = time.Now()
		if err := b.k.AddDestination(vsKey(s.VIP), dest(repl)); err != nil {
			return f, err
		}
		if err := b.k.DeleteDestination(vsKey(s.VIP), dest(old).DestinationKey); err != nil {
			return f, err
		}
		changes = append(changes, time.Since(start))
		old, repl = repl, old
	}
	f.Change = kpbench.Median(changes)
	return f, nil
}

// rssSettle is how long after a proxy's first full sync its RSS is read
// (Proxy.RSSFirstSync).
const rssSettle = 2 * time.Second

// proxy runs one proxy through the measurements. Failures end up in
// Proxy.Err with the tail of its log, so that the other proxy still runs.
func (b *bench) proxy(name, bin string, args []string, syncs syncMetric, view kernelView, round *int) kpbench.Proxy {
	p := kpbench.Proxy{Name: name}
	logPath := "/tmp/" + name + ".log"
	if err := b.measure(&p, bin, args, syncs, view, logPath, round); err != nil {
		p.Err = err.Error()
		fmt.Fprintf(b.out, "== %s failed: %v\n-- %s log (tail) --\n%s\n", name, err, name, tail(logPath, max(b.o.logTail, 6<<10)))
	} else if b.o.logTail > 0 {
		fmt.Fprintf(b.out, "-- %s log (tail) --\n%s\n", name, tail(logPath, b.o.logTail))
	}
	return p
}

func (b *bench) measure(p *kpbench.Proxy, bin string, args []string, syncs syncMetric, view kernelView, logPath string, round *int) error {
	if bin == "" {
		return errors.New("no binary given")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer stop(cmd, exited, b.out, p.Name)
	pid := cmd.Process.Pid
	fmt.Fprintf(b.out, "== %s started (pid %d)\n", p.Name, pid)
	// A run that fails (a table never complete at 10,000 Services) still
	// says how much memory it held when it was given up.
	defer func() {
		if p.RSS == 0 {
			p.RSS, p.PeakRSS, _ = memory(pid)
			fmt.Fprintf(b.out, "== %s: RSS when given up %d MiB (peak %d MiB)\n", p.Name, p.RSS>>20, p.PeakRSS>>20)
		}
	}()
	// profile starts switchyard's CPU profile, when asked for: at its
	// start, or once its first full sync has ended (-profile-changes).
	// The profile is printed before the proxy stops.
	var profiled chan struct{}
	defer func() {
		if profiled != nil {
			<-profiled
		}
	}()
	profile := func() {
		if p.Name != kpbench.Switchyard || b.o.switchyardProfile <= 0 {
			return
		}
		done := make(chan struct{})
		profiled = done
		go func() {
			defer close(done)
			d := b.o.switchyardProfile
			printProfile(b.out, p.Name, fmt.Sprintf("profile?seconds=%d", int(d.Seconds())), kpbench.ProfileMarker, d+time.Minute)
		}()
	}
	if !b.o.profileChanges {
		profile()
	}

	// Until every endpoint is in the kernel's table. A read of a large
	// table costs the guest's one CPU as much as the proxy's own work
	// (seen: 100ms reads added 6 s to switchyard's 1,000 Services), so
	// reads are spaced at least 4 times their cost: they take a fifth of
	// the CPU at most.
	var (
		nextRead  time.Time
		reads     int
		readsTook time.Duration // the reads' wall time, which the proxy did not have
	)
	err = poll(exited, b.o.completeTimeout, b.o.completePoll, func() (bool, error) {
		if time.Now().Before(nextRead) {
			return false, nil
		}
		began := time.Now()
		missing, err := view.missing(b.w)
		if err != nil {
			return false, err
		}
		took := time.Since(began)
		reads, readsTook = reads+1, readsTook+took
		nextRead = time.Now().Add(4 * took)
		return missing == 0, nil
	})
	if err != nil {
		// How long it ran without one, for the table's lower bound.
		p.GaveUp = time.Since(start)
		p.CPUGaveUp, _ = cpu(pid)
		return fmt.Errorf("%s table never complete: %w", view, err)
	}
	p.Complete = time.Since(start)
	p.CPUComplete, _ = cpu(pid)
	fmt.Fprintf(b.out, "== %s: %s table complete after %s (CPU %s; %d reads of the table took %s)\n", p.Name, view,
		p.Complete.Round(time.Millisecond), p.CPUComplete, reads, readsTook.Round(time.Millisecond))

	// Until its first sync ended, as its metrics say.
	err = poll(exited, b.o.syncTimeout, 250*time.Millisecond, func() (bool, error) {
		n, err := syncs.read()
		return err == nil && n >= 1, nil
	})
	if err != nil {
		p.GaveUp = time.Since(start)
		p.CPUGaveUp, _ = cpu(pid)
		return fmt.Errorf("no sync ended (%s): %w", syncs.name, err)
	}
	p.FirstSync = time.Since(start)
	p.CPUFirstSync, _ = cpu(pid)
	rss, _, _ := memory(pid)
	// The memory after the start settles: sampled rssSettle after the
	// first sync ended, for every proxy alike, rather than at the
	// instant its metric changed (switchyard returns the start's garbage
	// to the kernel right after, and the instant raced it).
	time.Sleep(rssSettle)
	p.RSSFirstSync, p.PeakRSSFirstSync, _ = memory(pid)
	fmt.Fprintf(b.out, "== %s: first sync ended after %s (CPU %s, RSS %d MiB then, %d MiB %s later)\n", p.Name, p.FirstSync.Round(time.Millisecond),
		p.CPUFirstSync, rss>>20, p.RSSFirstSync>>20, rssSettle)
	if b.o.profileChanges {
		profile()
	}
	if p.Name == kpbench.Switchyard && b.o.switchyardHeap {
		// Every allocation since the start (alloc_space) and what is
		// live (inuse_space, as of the last collection).
		printProfile(b.out, p.Name, "heap", kpbench.HeapMarker, time.Minute)
	}
	syncs.printDiag(b.out, p.Name)

	for range b.o.changes {
		// This process's own garbage (the table reads while the proxy
		// started: /proc/net/ip_vs is megabytes at 10,000 Services) is
		// collected before the write, not during it: the guest has one
		// CPU, which the proxy would share with that collection.
		runtime.GC()
		// Both proxies rate-limit syncs to one a second: wait it out so
		// that the change starts a sync at once.
		time.Sleep(1500 * time.Millisecond)
		c := b.w.NextChange(*round)
		*round++
		if err := b.warmUp(c); err != nil {
			return err
		}
		before, err := syncs.read()
		if err != nil {
			return err
		}
		cpuBefore, _ := cpu(pid)
		changeStart := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err = b.client.DiscoveryV1().EndpointSlices(kpbench.Namespace).Patch(ctx,
			kpbench.SliceName(b.w.Services[c.Service].Name), types.JSONPatchType,
			kpbench.ChangePatch(c, changeStart), metav1.PatchOptions{})
		cancel()
		// The API server's answer: its share, with the network's, of
		// the time until a watcher hears of the change.
		answered := time.Since(changeStart)
		if err != nil {
			return fmt.Errorf("patch endpoint slice: %w", err)
		}
		b.w.ApplyChange(c)
		// Reads are spaced 4 times their cost, as above, but never more
		// than the view's maxSpacing apart: a read takes seconds when
		// the host starves the guest, which must not delay the next
		// read by 4 times that.
		var nextRead time.Time
		err = poll(exited, b.o.changeTimeout, 2*time.Millisecond, func() (bool, error) {
			if time.Now().Before(nextRead) {
				return false, nil
			}
			began := time.Now()
			ok, err := view.has(b.w.Services[c.Service].VIP, c.New)
			nextRead = time.Now().Add(min(4*time.Since(began), view.maxSpacing()))
			return ok, err
		})
		if err != nil {
			return fmt.Errorf("change %d never visible: %w", len(p.Changes)+1, err)
		}
		visible := time.Since(changeStart)
		p.Changes = append(p.Changes, visible)
		err = poll(exited, b.o.changeTimeout, 50*time.Millisecond, func() (bool, error) {
			n, err := syncs.read()
			return err == nil && n > before, nil
		})
		if err != nil {
			return fmt.Errorf("change %d: no sync ended: %w", len(p.Changes), err)
		}
		cpuAfter, _ := cpu(pid)
		p.ChangeCPU = append(p.ChangeCPU, cpuAfter-cpuBefore)
		// The write's time (the trigger time the slice carries) lines
		// the sample up with the proxy's own log (--v=4).
		fmt.Fprintf(b.out, "== %s: change %d written at %s (PATCH answered after %s), visible after %s, sync ended after %s (CPU %s)\n",
			p.Name, len(p.Changes), changeStart.UTC().Format(time.RFC3339Nano), answered.Round(100*time.Microsecond),
			visible.Round(100*time.Microsecond), time.Since(changeStart).Round(time.Millisecond), cpuAfter-cpuBefore)
	}
	if p.Name == kpbench.Switchyard && b.o.resync {
		if err := b.resyncCPU(exited, pid); err != nil {
			return fmt.Errorf("periodic resync: %w", err)
		}
	}
	syncs.printDiag(b.out, p.Name)
	p.RSS, p.PeakRSS, _ = memory(pid)
	fmt.Fprintf(b.out, "== %s: RSS at the end %d MiB (peak %d MiB)\n", p.Name, p.RSS>>20, p.PeakRSS>>20)
	return syncs.checkPolicy()
}

// resyncCPU prints switchyard's CPU between the ends of two periodic full
// resyncs: one syncPeriod holding one resync (and the statistics ticks and
// the metrics reads of this wait, every 500 ms), and how long the second
// resync took, and its CPU, from the read that saw it start
// (syncs_total{mode="full"} counts it) to the one that saw it end
// (sync_duration_seconds_count): up to 500 ms of its start are missed.
func (b *bench) resyncCPU(exited <-chan error, pid int) error {
	full := syncMetric{name: "switchyard_syncs_total", label: `mode="full"`}
	ended := syncMetric{name: "switchyard_sync_duration_seconds_count"}
	// next waits for the next full resync to start and end, and returns
	// when it was seen to start, and the CPU then.
	var startCPU time.Duration
	next := func() (time.Time, error) {
		n, err := full.read()
		if err != nil {
			return time.Time{}, err
		}
		var started time.Time
		var endedBefore float64
		err = poll(exited, 2*time.Minute, 500*time.Millisecond, func() (bool, error) {
			if started.IsZero() {
				m, err := full.read()
				if err != nil || m <= n {
					return false, err
				}
				started = time.Now()
				startCPU, _ = cpu(pid)
				endedBefore, err = ended.read()
				return false, err
			}
			e, err := ended.read()
			return e > endedBefore, err
		})
		return started, err
	}
	if _, err := next(); err != nil {
		return err
	}
	cpu0, _ := cpu(pid)
	t0 := time.Now()
	started, err := next()
	if err != nil {
		return err
	}
	cpu1, _ := cpu(pid)
	fmt.Fprintf(b.out, "== switchyard: one syncPeriod with a full resync: CPU %s over %s; the resync took %s, CPU %s (500 ms polls)\n",
		cpu1-cpu0, time.Since(t0).Round(time.Millisecond), time.Since(started).Round(time.Millisecond), cpu1-startCPU)
	return nil
}

// memory returns the process's VmRSS and VmHWM in bytes.
func memory(pid int) (rss, peak int64, err error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, err
	}
	return kpbench.ParseStatusMemory(string(status))
}

// printProfile fetches a CPU profile of length d from the proxy's
// /debug/pprof/profile, starting as soon as its metrics listener answers,
// and prints it in base64 on one line after ProfileMarker.
func printProfile(out io.Writer, proxy, path, marker string, timeout time.Duration) {
	client := &http.Client{Timeout: timeout}
	url := "http://127.0.0.1:10249/debug/pprof/" + path
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
			}
			if err != nil {
				fmt.Fprintf(out, "== %s profile: %v\n", proxy, err)
				return
			}
			fmt.Fprintf(out, "%s%s\n", marker, base64.StdEncoding.EncodeToString(data))
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(out, "== %s profile: %v\n", proxy, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends a proxy with SIGTERM, then SIGKILL.
func stop(cmd *exec.Cmd, exited <-chan error, out io.Writer, name string) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		fmt.Fprintf(out, "== %s did not stop within 20s of SIGTERM; killed\n", name)
	}
}

// poll calls done every interval until it reports true, the process
// exits or timeout passes.
func poll(exited <-chan error, timeout, interval time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not after %s", timeout)
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the process exited: %v", err)
		case <-time.After(interval):
		}
	}
}

func readTable() (kpbench.Table, error) {
	f, err := os.Open("/proc/net/ip_vs")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return kpbench.ParseProcIPVS(f)
}

// metricsClient reads the proxies' metrics. Uncompressed: the guest reads
// them every 50 ms while a change's sync runs, and gzip made each read
// cost the proxy measured a third more of the guest's one CPU (a CPU
// profile of switchyard's changes: 0.39 s of its 1.05 s serving the
// reads was compress/flate).
var metricsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// syncMetric is the counter of a proxy's ended syncs: a metric name and
// an optional label pair the samples must carry. diag names the metrics
// printed, for reading the numbers, after the first sync and at the end.
type syncMetric struct {
	name, label string
	diag        []string
	// policy, when set, must have been evaluated successfully for
	// policyServices Services by the end of the run, and never failed
	// (checkPolicy).
	policy         string
	policyServices int
}

// checkPolicy reads the proxy's policy metrics: an error unless m.policy
// was evaluated successfully at least m.policyServices times and never
// failed.
func (m syncMetric) checkPolicy() error {
	if m.policy == "" {
		return nil
	}
	label := fmt.Sprintf("policy=%q", m.policy)
	ok, err := (syncMetric{name: "switchyard_policy_evaluations_total", label: label + `,result="success"`}).read()
	if err != nil {
		return err
	}
	failed, err := (syncMetric{name: "switchyard_policy_failures_total", label: label}).read()
	if err != nil {
		return err
	}
	if ok < float64(m.policyServices) || failed > 0 {
		return fmt.Errorf("policy %s: %v successful evaluations (want at least %d, one per Service), %v failures", m.policy, ok, m.policyServices, failed)
	}
	return nil
}

// printDiag prints the proxy's samples of the diag metrics on one line.
func (m syncMetric) printDiag(out io.Writer, proxy string) {
	resp, err := metricsClient.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		fmt.Fprintf(out, "== %s metrics: %v\n", proxy, err)
		return
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var samples []string
	for _, line := range strings.Split(string(data), "\n") {
		for _, name := range m.diag {
			if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
				samples = append(samples, line)
			}
		}
	}
	fmt.Fprintf(out, "== %s metrics: %s\n", proxy, strings.Join(samples, "; "))
}

// read reads the counter from the proxy's metrics endpoint, which both
// serve on 127.0.0.1:10249.
func (m syncMetric) read() (float64, error) {
	resp, err := metricsClient.Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	v, found, err := kpbench.MetricSum(resp.Body, m.name, m.label)
	if err == nil && !found {
		return 0, nil // not observed yet
	}
	return v, err
}

func cpu(pid int) (time.Duration, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return kpbench.ParseStatCPU(string(stat))
}

// cleanKernel removes what any run left: every IPVS service, the dummy
// links holding VIPs, the nftables ruleset (iptables-nft's and
// switchyard's tables) and then the ipsets it referenced.
func cleanKernel(k *ipvs.Netlink) error {
	svcs, err := k.Services()
	if err != nil {
		return err
	}
	for _, s := range svcs {
		if err := k.DeleteService(s.VirtualServiceKey); err != nil {
			return fmt.Errorf("delete IPVS service: %w", err)
		}
	}
	for _, name := range []string{floorDummy, "kube-ipvs0", "switchyard0"} {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
		}
	}
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.FlushRuleset()
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("flush nftables ruleset: %w", err)
	}
	if path, err := exec.LookPath("ipset"); err == nil {
		if out, err := exec.Command(path, "destroy").CombinedOutput(); err != nil {
			return fmt.Errorf("ipset destroy: %w: %s", err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// resetIPVS unloads the IPVS modules and loads them again, which frees
// the kernel's trash of deleted real servers. IPVS keeps a deleted real
// server for 1 to 4 minutes (IP_VS_DEST_TRASH_PERIOD, for reuse) and
// scans that whole list on every real server added
// (ip_vs_trash_get_dest), so that a run after one that deleted 10,000
// real servers creates its own several times slower: switchyard at 1,000
// Services took 23 s to complete on a fresh kernel, 39 s after the floor.
func resetIPVS() error {
	data, err := os.ReadFile("/proc/modules")
	if err != nil {
		return err
	}
	var mods []string // the schedulers, then ip_vs, which they use
	for _, line := range strings.Split(string(data), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "ip_vs_") {
			mods = append(mods, name)
		}
	}
	mods = append(mods, "ip_vs")
	if out, err := exec.Command("/bin/busybox", append([]string{"rmmod"}, mods...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("unload %s: %w: %s", strings.Join(mods, " "), err, bytes.TrimSpace(out))
	}
	if out, err := exec.Command("/bin/busybox", append([]string{"modprobe", "-a"}, mods...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("load %s: %w: %s", strings.Join(mods, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

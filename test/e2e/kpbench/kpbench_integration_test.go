//go:build integration && linux

package kpbench_test

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/e2e/kpbench"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// envInt reads a positive integer setting, or returns def.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// BenchmarkIntegrationKubeProxyIPVS runs the side-by-side benchmark once
// (package doc). Settings: KPBENCH_SERVICES (default 1000),
// KPBENCH_CHANGES (endpoint changes per proxy, default 5), KPBENCH_MEM
// (guest MiB, default from the size), KPBENCH_ONLY (default
// kpbench.DefaultOnly, kube-proxy being its IPVS mode, the switchyard-*
// parts switchyard with balancing policies; "switch" measures a node switching from
// kube-proxy to switchyard and back with --cleanup-kube-proxy and
// --cleanup, and fails on what either leaves), KPBENCH_LOG_TAIL (bytes of each proxy's
// log to print, default none), KPBENCH_SWITCHYARD_ARGS (extra daemon
// flags, such as --v=4), KPBENCH_PROFILE (a duration: profile the
// daemon's CPU that long from its start, saved to KPBENCH_PROFILE_OUT;
// with KPBENCH_PROFILE_FROM=changes, from the end of its first full sync,
// so that the profile holds the endpoint changes),
// KPBENCH_SWITCHYARD_BASE (a switchyard binary of another revision, not
// under /tmp, measured as "switchyard-base" in KPBENCH_ONLY),
// KPBENCH_WASM (the WebAssembly policy module of "switchyard-wasm" in
// KPBENCH_ONLY; "switchyard-local-first" needs nothing more),
// KPBENCH_HEAP=1 (switchyard's heap profile when its first full sync
// ended, saved to KPBENCH_HEAP_OUT), KPBENCH_COMPLETE_POLL (how often the guest reads the kernel's table
// until it is complete, default 100ms), KPBENCH_RESYNC=1 (after the
// changes, print switchyard's CPU over one syncPeriod holding a periodic
// full resync). kube-proxy comes from
// $SWITCHYARD_KUBE_BIN, built by test/tools/kube-binaries.sh --kube-proxy.
//
//	SWITCHYARD_KUBE_BIN=$(test/tools/kube-binaries.sh --kube-proxy) KPBENCH_WASM=$PWD/bin/wasm/go/leastconn.wasm \
//	  go test -tags integration -run '^$' -bench KubeProxyIPVS -benchtime 1x -timeout 3h ./test/e2e/kpbench
func BenchmarkIntegrationKubeProxyIPVS(b *testing.B) {
	n := envInt(b, "KPBENCH_SERVICES", 1000)
	changes := envInt(b, "KPBENCH_CHANGES", 5)
	// kube-proxy reached 250 MiB RSS at 10,000 Services; the initramfs
	// holds about 150 MiB of binaries.
	mem := envInt(b, "KPBENCH_MEM", 1024+n/10)
	only := os.Getenv("KPBENCH_ONLY")
	if only == "" {
		only = kpbench.DefaultOnly
	}
	w, err := kpbench.NewWorkload(n, 10)
	if err != nil {
		b.Fatal(err)
	}
	kubeProxy := filepath.Join(os.Getenv(apitest.EnvBinDir), "kube-proxy")
	if _, err := os.Stat(kubeProxy); err != nil {
		b.Fatalf("no kube-proxy in $%s (run test/tools/kube-binaries.sh --kube-proxy): %v", apitest.EnvBinDir, err)
	}
	extra := append([]string{kubeProxy}, kpbench.GuestTools...)
	for _, tool := range kpbench.GuestTools {
		if _, err := os.Stat(tool); err != nil {
			b.Fatalf("%v (test/lab/deps.sh --netfilter-tools installs Debian's iptables, ipset and nftables)", err)
		}
	}

	srv := apitest.Start(b)
	ctx := b.Context()
	began := time.Now()
	createObjects(b, srv.Admin, w)
	b.Logf("created %d Services and EndpointSlices in %s", n, time.Since(began).Round(time.Millisecond))

	dir := b.TempDir()
	guestData := filepath.Join(dir, "guest", "testdata")
	if err := os.MkdirAll(guestData, 0o755); err != nil {
		b.Fatal(err)
	}
	// The guest gets switchyard at the same path (Job.Extra, no size
	// limit), which must not be under /tmp: the guest mounts a tmpfs there.
	// One directory per checkout: two worktrees benchmarking at once
	// must not overwrite each other's daemon between build and boot.
	wd, err := os.Getwd()
	if err != nil {
		b.Fatal(err)
	}
	syDir := filepath.Join(filepath.Dir(lab.DefaultCacheDir()), "kpbench", fmt.Sprintf("%x", sha256.Sum256([]byte(wd)))[:12])
	if err := os.MkdirAll(syDir, 0o755); err != nil {
		b.Fatal(err)
	}
	switchyard := filepath.Join(syDir, "switchyard")
	kpguest := filepath.Join(dir, "kpguest")
	buildStatic(b, kpguest, "github.com/switchyard-lb/switchyard/test/e2e/kpbench/cmd/kpguest")
	if strings.Contains(only, "switch") { // switchyard, or the switch
		buildStatic(b, switchyard, "github.com/switchyard-lb/switchyard/cmd/switchyard")
		extra = append(extra, switchyard)
	}
	base := os.Getenv("KPBENCH_SWITCHYARD_BASE")
	if strings.Contains(only, kpbench.SwitchyardBase) {
		if _, err := os.Stat(base); err != nil {
			b.Fatalf("%s needs $KPBENCH_SWITCHYARD_BASE, a static switchyard binary outside /tmp: %v", kpbench.SwitchyardBase, err)
		}
		extra = append(extra, base)
	}
	if err := os.WriteFile(filepath.Join(guestData, "switchyard.yaml"), []byte(kpbench.SwitchyardConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	if strings.Contains(only, kpbench.SwitchyardWasm) {
		writePolicyModule(b, os.Getenv("KPBENCH_WASM"), filepath.Join(guestData, kpbench.PolicyModuleGzip))
	}
	// The guest reaches the host's loopback as 10.0.2.2; the serving
	// certificate names 127.0.0.1 and localhost, so verify it as localhost.
	u, err := url.Parse(srv.Admin.Host)
	if err != nil {
		b.Fatal(err)
	}
	guestCfg := rest.CopyConfig(srv.Admin)
	guestCfg.Host = "https://10.0.2.2:" + u.Port()
	guestCfg.TLSClientConfig.ServerName = "localhost"
	kc, err := os.ReadFile(srv.WriteKubeconfig(b, guestCfg))
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(guestData, "kubeconfig"), kc, 0o600); err != nil {
		b.Fatal(err)
	}

	modules := append(append(append([]string{}, lab.DefaultModules...), lab.UserNetModules...), kpbench.KubeProxyModules...)
	assets, err := lab.EnsureAssets(ctx, lab.Config{Modules: modules})
	if err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	job := lab.Job{
		Binary: kpguest,
		Args: []string{"-services", strconv.Itoa(n), "-endpoints", "10", "-changes", strconv.Itoa(changes),
			"-kube-proxy", kubeProxy, "-switchyard", switchyard, "-switchyard-base", base, "-only", only,
			"-switchyard-args", os.Getenv("KPBENCH_SWITCHYARD_ARGS"), "-switchyard-profile", envDuration(b, "KPBENCH_PROFILE").String(),
			"-profile-changes=" + strconv.FormatBool(os.Getenv("KPBENCH_PROFILE_FROM") == "changes"),
			"-switchyard-heap=" + strconv.FormatBool(os.Getenv("KPBENCH_HEAP") == "1"),
			"-complete-poll", cmp.Or(envDuration(b, "KPBENCH_COMPLETE_POLL"), 100*time.Millisecond).String(),
			"-log-tail", strconv.Itoa(envInt(b, "KPBENCH_LOG_TAIL", 0)),
			"-resync=" + strconv.FormatBool(os.Getenv("KPBENCH_RESYNC") == "1")},
		MemoryMB: mem,
		Timeout:  3 * time.Hour,
		Output:   io.MultiWriter(&out, prefixWriter{w: os.Stderr, prefix: "guest: "}),
		TestData: guestData,
		UserNet:  true,
		Extra:    extra,
	}
	for b.Loop() {
		res, err := lab.Run(ctx, assets, job)
		if err != nil {
			b.Fatal(err)
		}
		if res.ExitCode != 0 {
			b.Fatalf("guest exited with %d", res.ExitCode)
		}
	}
	r := parseResult(b, out.String())
	saveProfile(b, out.String())
	fmt.Printf("\n%s", r.Table())
	kp, kn, sy := r.Proxy(kpbench.KubeProxy), r.Proxy(kpbench.KubeProxyNftables), r.Proxy(kpbench.Switchyard)
	b.ReportMetric(float64(n), "services")
	b.ReportMetric((r.Floor.VIPs + r.Floor.Services).Seconds(), "floor-s")
	b.ReportMetric(kp.Complete.Seconds(), "kp-complete-s")
	b.ReportMetric(kn.Complete.Seconds(), "kpnft-complete-s")
	b.ReportMetric(sy.Complete.Seconds(), "sy-complete-s")
	b.ReportMetric(kp.FirstSync.Seconds(), "kp-first-sync-s")
	b.ReportMetric(kn.FirstSync.Seconds(), "kpnft-first-sync-s")
	b.ReportMetric(sy.FirstSync.Seconds(), "sy-first-sync-s")
	b.ReportMetric(float64(r.Floor.Change.Microseconds())/1000, "floor-change-ms")
	b.ReportMetric(float64(kp.MedianChange().Microseconds())/1000, "kp-change-ms")
	b.ReportMetric(float64(kn.MedianChange().Microseconds())/1000, "kpnft-change-ms")
	b.ReportMetric(float64(sy.MedianChange().Microseconds())/1000, "sy-change-ms")
	for _, p := range r.Proxies {
		// RSS at the end of each run, by the name KPBENCH_ONLY gives it.
		b.ReportMetric(float64(p.RSS)/(1<<20), p.Name+"-rss-MiB")
	}
	for _, p := range r.Proxies {
		if p.Err != "" {
			b.Errorf("%s: %s", p.Name, p.Err)
		}
	}
	if sw := r.Switch; sw != nil {
		b.ReportMetric(sw.CleanupKubeProxy.Seconds(), "switch-cleanup-kube-proxy-s")
		b.ReportMetric(sw.Outage.Seconds(), "switch-outage-s")
		b.ReportMetric(sw.CleanupSwitchyard.Seconds(), "switch-cleanup-s")
		if len(sw.KubeProxyLeft) > 0 {
			b.Errorf("switchyard --cleanup-kube-proxy left %q", sw.KubeProxyLeft)
		}
		if len(sw.SwitchyardLeft) > 0 {
			b.Errorf("switchyard --cleanup left %q", sw.SwitchyardLeft)
		}
	}
}

// createObjects writes the Node both proxies run as, then the workload's
// Services and EndpointSlices, several at a time.
func createObjects(b *testing.B, admin *rest.Config, w kpbench.Workload) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	// The policy ConfigMap of switchyard-wasm lives in switchyard's
	// namespace (the guest creates and deletes the ConfigMap itself).
	for _, ns := range []string{kpbench.Namespace, kpbench.PolicyNamespace} {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: kpbench.NodeName},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.2.15"}}},
	}
	created, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	created.Status = node.Status
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
	svcs, slices := w.Objects()
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				_, err := client.CoreV1().Services(kpbench.Namespace).Create(ctx, svcs[i], metav1.CreateOptions{})
				if err == nil {
					_, err = client.DiscoveryV1().EndpointSlices(kpbench.Namespace).Create(ctx, slices[i], metav1.CreateOptions{})
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("create %s: %w", svcs[i].Name, err):
					default:
					}
				}
			}
		})
	}
	for i := range svcs {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// writePolicyModule writes the WebAssembly module at path, gzipped, to
// out: switchyard-wasm's policy (bench.mk passes an example of
// wasm-sdk, built by make wasm-sdk-examples' rule).
func writePolicyModule(b *testing.B, path, out string) {
	if path == "" {
		b.Fatalf("%s needs $KPBENCH_WASM, a WebAssembly policy module (make bench-kubeproxy builds wasm-sdk's Go leastconn)", kpbench.SwitchyardWasm)
	}
	module, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	gz, err := kpbench.GzipModule(module)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(out, gz, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: policy module %s, %d KiB (%d KiB gzipped)", kpbench.SwitchyardWasm, path, len(module)>>10, len(gz)>>10)
}

func buildStatic(b *testing.B, out, pkg string) {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if data, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, data)
	}
}

func envDuration(b *testing.B, name string) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return d
}

// saveProfile writes the switchyard CPU and heap profiles the guest
// printed, if any, to $KPBENCH_PROFILE_OUT and $KPBENCH_HEAP_OUT (default:
// switchyard.cpu.pprof and switchyard.heap.pprof in the temporary
// directory), for go tool pprof.
func saveProfile(b *testing.B, out string) {
	for _, p := range []struct{ marker, env, file, what string }{
		{kpbench.ProfileMarker, "KPBENCH_PROFILE_OUT", "switchyard.cpu.pprof", "CPU"},
		{kpbench.HeapMarker, "KPBENCH_HEAP_OUT", "switchyard.heap.pprof", "heap (at its first full sync's end; -sample_index=alloc_space for the start's allocations)"},
	} {
		for _, line := range strings.Split(out, "\n") {
			data, ok := strings.CutPrefix(line, p.marker)
			if !ok {
				continue
			}
			prof, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				b.Fatalf("guest profile: %v", err)
			}
			path := cmp.Or(os.Getenv(p.env), filepath.Join(os.TempDir(), p.file))
			if err := os.WriteFile(path, prof, 0o644); err != nil {
				b.Fatal(err)
			}
			b.Logf("switchyard %s profile: go tool pprof %s", p.what, path)
		}
	}
}

func parseResult(b *testing.B, out string) kpbench.Result {
	for _, line := range strings.Split(out, "\n") {
		data, ok := strings.CutPrefix(line, kpbench.ResultMarker)
		if !ok {
			continue
		}
		var r kpbench.Result
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			b.Fatalf("guest result %q: %v", data, err)
		}
		return r
	}
	b.Fatal("the guest printed no result")
	return kpbench.Result{}
}

// prefixWriter streams the guest's progress, each line prefixed.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(data []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, kpbench.ResultMarker) || strings.HasPrefix(line, kpbench.ProfileMarker) || strings.HasPrefix(line, kpbench.HeapMarker) {
			continue
		}
		if _, err := io.WriteString(p.w, p.prefix+line); err != nil {
			return 0, err
		}
	}
	return len(data), nil
}

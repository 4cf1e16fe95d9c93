//go:build integration

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// The end-to-end tests run runDaemon, as run does, against the real API
// server with a recording dry-run dataplane: every table the daemon applied
// is kept, so a test can check each one, not only the last.

// recordingDataplane is a dry-run dataplane that keeps the table after
// every successful Apply. It is goroutine-safe.
type recordingDataplane struct {
	*dryrun.Dataplane

	mu     sync.Mutex
	tables [][]string // one per successful Apply, as tableLines renders it
}

var _ plugin.Dataplane = (*recordingDataplane)(nil)

func (r *recordingDataplane) Apply(ctx context.Context, u plugin.Update) error {
	if err := r.Dataplane.Apply(ctx, u); err != nil {
		return err
	}
	lines := tableLines(r.Dataplane)
	r.mu.Lock()
	r.tables = append(r.tables, lines)
	r.mu.Unlock()
	return nil
}

// Tables returns the tables applied so far, oldest first.
func (r *recordingDataplane) Tables() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tables)
}

// tableLines renders the dry-run table as one line per virtual service:
// "PROTO addr:port sched [flags] -> dest:port/weight ...".
func tableLines(dp *dryrun.Dataplane) []string {
	var out []string
	for _, vs := range dp.Table() {
		line := fmt.Sprintf("%s %s %s", vs.Protocol, netip.AddrPortFrom(vs.Addr, vs.Port), vs.Scheduler)
		if len(vs.Flags) > 0 {
			line += " " + strings.Join(vs.Flags, ",")
		}
		if vs.AffinityTimeout > 0 {
			line += fmt.Sprintf(" persistent %d", int64(vs.AffinityTimeout/time.Second))
		}
		line += " ->"
		for _, d := range vs.Destinations {
			line += fmt.Sprintf(" %s/%d", netip.AddrPortFrom(d.Addr, d.Port), d.Weight)
		}
		out = append(out, line)
	}
	return out
}

func mustAddrPort(s string) netip.AddrPort {
	return netip.MustParseAddrPort(s)
}

// e2eDaemon is one runDaemon against the test API server.
type e2eDaemon struct {
	*daemonProc
	tc  *testConfig
	dp  *recordingDataplane
	dsr *recordingDSR
}

// recordingDSR is a goroutine-safe reconcile.DSRDataplane recording the
// plans applied.
type recordingDSR struct {
	mu    sync.Mutex
	plans []model.DSRPlan
}

func (r *recordingDSR) Apply(p model.DSRPlan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plans = append(r.plans, p)
	return nil
}

// last returns the last plan applied, false before the first.
func (r *recordingDSR) last() (model.DSRPlan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.plans) == 0 {
		return model.DSRPlan{}, false
	}
	return r.plans[len(r.plans)-1], true
}

// startE2E runs the daemon as node with the client configuration cfg and
// the extra config lines. Cleanup stops it (if the test did not) and, when
// the test failed, logs its output.
func startE2E(t *testing.T, cfg *rest.Config, node, extraConfig string) *e2eDaemon {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &e2eDaemon{
		tc:  writeTestConfig(t, extraConfig),
		dp:  &recordingDataplane{Dataplane: dryrun.New()},
		dsr: &recordingDSR{},
	}
	w, err := config.NewWatcher(d.tc.Path, configChecks()...)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d.daemonProc = goDaemon(context.Background(), "daemon "+node, logs, func(ctx context.Context) error {
		return runDaemon(ctx, daemonConfig{
			Watcher:      w,
			Client:       client,
			NodeName:     node,
			Log:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			NewDataplane: func(*config.Config, *slog.Logger) (plugin.Dataplane, error) { return d.dp, nil },
			NewDSR: func(cfg *config.Config) (*reconcile.DSRConfig, func() error, error) {
				dc := dsrSettings(cfg.Dataplane.DSR)
				dc.Dataplane = d.dsr
				return &dc, func() error { return nil }, nil
			},
		})
	})
	t.Cleanup(func() {
		d.Stop(t)
		d.LogIfFailed(t)
	})
	return d
}

// state returns the daemon's /debug/state.
func (d *e2eDaemon) state() (*reconcile.State, error) {
	var st reconcile.State
	if err := harness.DebugState(d.tc.Metrics, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// applied returns the applied plans of the Services in namespace ns, by
// Service name.
func (d *e2eDaemon) applied(ns string) (map[string]reconcile.ServiceState, error) {
	st, err := d.state()
	if err != nil {
		return nil, err
	}
	out := make(map[string]reconcile.ServiceState)
	for _, s := range st.Applied {
		if name, ok := strings.CutPrefix(s.Service, ns+"/"); ok {
			out[name] = s
		}
	}
	return out, nil
}

// readyz returns /readyz's status and body.
func (d *e2eDaemon) readyz() (int, string) {
	code, body, err := httpGet("http://" + d.tc.Health + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	return code, strings.TrimSpace(body)
}

func (d *e2eDaemon) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	harness.WaitReady(t, d.tc.Health, timeout)
}

// Builders of the API objects the tests create.

func e2eService(name string, mutate ...func(*corev1.ServiceSpec)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
	for _, m := range mutate {
		m(&s.Spec)
	}
	return s
}

// e2eEndpoint is one endpoint: ready, serving and terminating as given.
type e2eEndpoint struct {
	addr, node                  string
	ready, serving, terminating bool
}

func readyAt(addr, node string) e2eEndpoint {
	return e2eEndpoint{addr: addr, node: node, ready: true, serving: true}
}

// e2eSlice is an EndpointSlice of service with the "http" TCP 8080 port
// (or ports), in family.
func e2eSlice(service, name string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...e2eEndpoint) *discoveryv1.EndpointSlice {
	if ports == nil {
		ports = []discoveryv1.EndpointPort{{Name: k8stest.Ptr("http"), Protocol: k8stest.Ptr(corev1.ProtocolTCP), Port: k8stest.Ptr(int32(8080))}}
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: family,
		Ports:       ports,
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{
			Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{
				Ready: k8stest.Ptr(e.ready), Serving: k8stest.Ptr(e.serving), Terminating: k8stest.Ptr(e.terminating),
			},
		}
		if e.node != "" {
			ep.NodeName = k8stest.Ptr(e.node)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// createAll creates the Services (returning them as the server filled them
// in: cluster IPs, node ports) and the EndpointSlices in ns.
func createAll(t *testing.T, client kubernetes.Interface, ns string, svcs []*corev1.Service, slices []*discoveryv1.EndpointSlice) map[string]*corev1.Service {
	t.Helper()
	ctx := t.Context()
	out := make(map[string]*corev1.Service, len(svcs))
	for _, s := range svcs {
		got, err := client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create Service %s: %v", s.Name, err)
		}
		out[s.Name] = got
	}
	for _, s := range slices {
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create EndpointSlice %s: %v", s.Name, err)
		}
	}
	return out
}

// createNode creates a Node with the given InternalIP addresses.
func createNode(t *testing.T, client kubernetes.Interface, name string, addrs ...string) {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	// A Node's status may be set on create, as the kubelet does.
	if _, err := client.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Node %s: %v", name, err)
	}
}

// Builders of the expected /debug/state entries. Every destination has
// weight 1 (no policy re-weighs), and the scheduler is the default rr.

func wantVS(proto, addr, kind string, dests ...string) reconcile.VirtualServiceState {
	v := reconcile.VirtualServiceState{
		Protocol: proto, Address: mustAddrPort(addr), Kind: kind, PortName: "http", Scheduler: "rr",
		Destinations: []reconcile.DestinationState{},
	}
	for _, d := range dests {
		v.Destinations = append(v.Destinations, reconcile.DestinationState{Address: mustAddrPort(d), Weight: 1})
	}
	return v
}

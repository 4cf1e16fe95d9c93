//go:build peers

package peers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchyard-lb/switchyard/core/lbipam"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
)

// The daemon suites run the real switchyard binary, built once per test
// process, in node namespaces against a real kube-apiserver
// (test/apitest). The API server listens on the host's loopback; each
// node namespace gets a forward of that address and port on its own
// loopback (netns.Forward), so a kubeconfig naming https://127.0.0.1:PORT
// works unchanged inside it. The daemons run as deploy/'s ServiceAccount.
// The dataplane is dryrun (the host kernel has no IPVS): the tests put
// the addresses on the nodes' lo and serve them themselves.

// daemonMetrics is the daemon's default metrics address (/metrics and
// /debug/state), on each node namespace's loopback.
const daemonMetrics = "127.0.0.1:10249"

// daemonLab is a bridge, a real API server and the daemon binary.
type daemonLab struct {
	srv *apitest.Server
	sw  *netns.Switch
	bin string
	// kubeconfig is the daemons': deploy/'s ServiceAccount.
	kubeconfig string
	// ns is the Kubernetes namespace of the test's Services.
	ns string
}

func newDaemonLab(t *testing.T) *daemonLab {
	t.Helper()
	netns.Require(t)
	if os.Getenv(apitest.EnvBinDir) == "" {
		const why = "daemon peer tests need the kube binaries: set " + apitest.EnvBinDir + " to the directory test/tools/kube-binaries.sh prints"
		if netns.Required() {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	lab := &daemonLab{bin: harness.SharedDaemon(t)}
	lab.srv = apitest.Start(t)
	// The daemons run as the DaemonSet's ServiceAccount with the
	// least-privilege RBAC of deploy/, which the allocator's Lease
	// namespace comes with.
	for _, f := range []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"} {
		if _, err := lab.srv.Kubectl(t, "apply", "-f", filepath.Join("..", "..", "deploy", f)); err != nil {
			t.Fatalf("applying deploy/%s: %v", f, err)
		}
	}
	lab.kubeconfig = lab.srv.WriteKubeconfig(t, lab.srv.ServiceAccountConfig(t, lbipam.DefaultLeaseNamespace, "switchyard"))
	lab.ns = lab.srv.Namespace(t)
	lab.sw = netns.NewBridge(t, "sw")
	return lab
}

// daemonNode is a node namespace on the lab's bridge, its Node object
// and, once started, its daemon.
type daemonNode struct {
	name  string
	ns    *netns.NS
	mac   net.HardwareAddr
	addr4 netip.Addr
	addr6 netip.Addr
	lab   *daemonLab
	d     *harness.Daemon
	http  *http.Client
	// nice, when set, is the daemon's niceness (nice -n).
	nice string
}

// addNode creates node name: a namespace with eth0 at 10.0.0.<host>/24
// and fd00::<host>/64 with mac, the API server forwarded to its
// loopback, and a Ready Node object with that InternalIP and labels.
func (l *daemonLab) addNode(t *testing.T, name string, host byte, mac net.HardwareAddr, labels map[string]string) *daemonNode {
	t.Helper()
	n := &daemonNode{
		name:  name,
		ns:    netns.New(t, name),
		mac:   mac,
		addr4: netip.AddrFrom4([4]byte{10, 0, 0, host}),
		addr6: netip.MustParseAddr(fmt.Sprintf("fd00::%d", host)), // 11 -> fd00::11
		lab:   l,
	}
	l.sw.Attach(t, n.ns, "eth0", mac, netip.PrefixFrom(n.addr4, 24), netip.PrefixFrom(n.addr6, 64))
	u, err := url.Parse(l.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	n.ns.Forward(t, u.Host, u.Host)
	// No keep-alive: a connection must not outlive a killed daemon.
	n.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: n.ns.DialContext, DisableKeepAlives: true,
	}}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err = l.srv.Client.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Node %s: %v", name, err)
	}
	n.setReady(t, true)
	return n
}

// setReady writes the Node's status, its InternalIP and Ready condition,
// as the kubelet (Ready) or the node lifecycle controller (NotReady, once
// the kubelet stops posting) would: there are neither here.
func (n *daemonNode) setReady(t *testing.T, ready bool) {
	t.Helper()
	ctx := t.Context()
	nodes := n.lab.srv.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading Node %s: %v", n.name, err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr4.String()}}
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: status, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing Node %s's status: %v", n.name, err)
	}
}

// start runs the daemon in the node's namespace with the dryrun
// dataplane and extra appended to its config; its log is shown if the
// test fails.
func (n *daemonNode) start(t *testing.T, extra string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	body := "apiVersion: " + harness.APIVersion + "\nkind: SwitchyardConfig\ndataplane:\n  mode: dryrun\n" + extra
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	wrap := []string{"ip", "netns", "exec", n.ns.Name()}
	if n.nice != "" {
		wrap = append(wrap, "nice", "-n", n.nice)
	}
	n.d = harness.ExecIn(t, wrap, n.name, n.lab.bin, nil,
		"--config", cfg, "--kubeconfig", n.lab.kubeconfig, "--hostname-override", n.name, "--log-format", "text")
	t.Cleanup(func() { n.d.LogIfFailed(t) })
}

// kill SIGKILLs the daemon: no withdrawal, no gossip leave.
func (n *daemonNode) kill(t *testing.T) {
	t.Helper()
	n.d.Kill(t)
}

// stop sends the daemon SIGTERM, as the kubelet does, and waits for it
// to exit cleanly.
func (n *daemonNode) stop(t *testing.T) {
	t.Helper()
	n.d.Stop(t)
}

// logged reports whether the daemon's log holds s.
func (n *daemonNode) logged(s string) bool {
	return strings.Contains(n.d.Logs.String(), s)
}

func (n *daemonNode) get(path string) (string, error) {
	resp, err := n.http.Get("http://" + daemonMetrics + path)
	if err != nil {
		return "", fmt.Errorf("%s: GET %s: %w", n.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: GET %s: %s", n.name, path, resp.Status)
	}
	return string(b), err
}

// metric returns the value of the first sample whose name and labels
// start with prefix.
func (n *daemonNode) metric(prefix string) (float64, error) {
	body, err := n.get("/metrics")
	if err != nil {
		return 0, err
	}
	v, err := harness.ParseMetric(body, prefix)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", n.name, err)
	}
	return v, nil
}

// debugState is the part of /debug/state the tests read.
type debugState struct {
	LastSync  time.Time `json:"lastSync"`
	Announced map[string][]struct {
		Address string `json:"address"`
	} `json:"announced"`
}

func (n *daemonNode) state() (*debugState, error) {
	body, err := n.get("/debug/state")
	if err != nil {
		return nil, err
	}
	var st debugState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("%s: /debug/state: %w", n.name, err)
	}
	return &st, nil
}

// announced returns the addresses /debug/state says the announcer last
// accepted, in its order.
func (n *daemonNode) announced(announcer string) ([]string, error) {
	st, err := n.state()
	if err != nil {
		return nil, err
	}
	set, ok := st.Announced[announcer]
	if !ok {
		return nil, fmt.Errorf("%s: announcer %s has announced nothing yet", n.name, announcer)
	}
	out := []string{}
	for _, a := range set {
		out = append(out, a.Address)
	}
	return out, nil
}

// bgpConfig is the config lines of a pool named name holding prefix and
// a BGP announcer of the same name serving it, speaking as nodeASN to
// peers (peer's flow mappings), with settings (a line under bgp:, or
// none).
func bgpConfig(name string, prefix netip.Prefix, settings string, peers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pools:\n  - name: %s\n    addresses: [%s]\n", name, prefix)
	fmt.Fprintf(&b, "announcers:\n  - name: %s\n    type: bgp\n    pools: [%s]\n    bgp:\n      asn: %d\n", name, name, nodeASN)
	if settings != "" {
		fmt.Fprintf(&b, "      %s\n", settings)
	}
	b.WriteString("      peers:\n")
	for _, p := range peers {
		fmt.Fprintf(&b, "        - %s\n", p)
	}
	return b.String()
}

// peer is a BGP peer's entry in bgpConfig: its address and AS number
// and the settings opts (a flow mapping's fields, such as "holdTime: 3s").
func peer(addr string, asn int, opts string) string {
	return fmt.Sprintf("{address: %s, asn: %d, %s}", addr, asn, opts)
}

// waitMembers waits until every node's gossip sees all of them.
func waitMembers(t *testing.T, nodes ...*daemonNode) {
	t.Helper()
	harness.Poll(t, 60*time.Second, func() error {
		for _, n := range nodes {
			v, err := n.metric("switchyard_membership_members ")
			if err != nil {
				return err
			}
			if int(v) != len(nodes) {
				return fmt.Errorf("%s sees %v members, want %d", n.name, v, len(nodes))
			}
		}
		return nil
	})

}

// createLB creates LoadBalancer Service name (port servePort, the port
// the tests' listeners serve on the nodes in place of IPVS) in the
// given families, with ready endpoints on every node (one per node and
// family, each family its own EndpointSlice, as the controller writes
// them).
func (l *daemonLab) createLB(t *testing.T, name string, families []corev1.IPFamily, nodes ...*daemonNode) {
	t.Helper()
	policy := corev1.IPFamilyPolicySingleStack
	if len(families) > 1 {
		policy = corev1.IPFamilyPolicyRequireDualStack
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeLoadBalancer,
			IPFamilies:     families,
			IPFamilyPolicy: &policy,
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: servePort, TargetPort: intstr.FromInt32(servePort),
			}},
		},
	}
	ctx := t.Context()
	if _, err := l.srv.Client.CoreV1().Services(l.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	ready := true
	port, proto, portName := int32(servePort), corev1.ProtocolTCP, "http"
	for _, fam := range families {
		at := discoveryv1.AddressTypeIPv4
		if fam == corev1.IPv6Protocol {
			at = discoveryv1.AddressTypeIPv6
		}
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: l.ns, Name: name + "-" + strings.ToLower(string(fam)),
				Labels: map[string]string{discoveryv1.LabelServiceName: name},
			},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
		}
		for i, n := range nodes {
			// Pod addresses: the dryrun dataplane never reaches them.
			addr := fmt.Sprintf("10.244.%d.10", i+1)
			if at == discoveryv1.AddressTypeIPv6 {
				addr = fmt.Sprintf("fd00:244:%d::10", i+1)
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses: []string{addr}, NodeName: &n.name,
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			})
		}
		if _, err := l.srv.Client.DiscoveryV1().EndpointSlices(l.ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating EndpointSlice %s: %v", s.Name, err)
		}
	}
}

// ingress returns the addresses in the Service's status.
func (l *daemonLab) ingress(ctx context.Context, name string) ([]string, error) {
	s, err := l.srv.Client.CoreV1().Services(l.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out, nil
}

// waitIngress waits until the allocator has written want to the
// Service's status.
func (l *daemonLab) waitIngress(t *testing.T, name string, want ...string) {
	t.Helper()
	harness.Poll(t, 30*time.Second, func() error {
		got, err := l.ingress(t.Context(), name)
		if err != nil {
			return err
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("ingress %v, want %v", got, want)
		}
		return nil
	})
}

//go:build integration

package deploy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/test/apitest"
)

const namespace = "switchyard-system"

// clusterWide and inNamespace are the daemon's effective permissions, as
// "verb group/resource", beyond what every authenticated user has.
var (
	clusterWide = []string{
		"create /events", "create events.k8s.io/events",
		"get /namespaces", "get /nodes", "get /services", "get discovery.k8s.io/endpointslices",
		"list /namespaces", "list /nodes", "list /services", "list discovery.k8s.io/endpointslices",
		"patch /events", "patch /services/status", "patch events.k8s.io/events",
		"update /services/status",
		"watch /namespaces", "watch /nodes", "watch /services", "watch discovery.k8s.io/endpointslices",
	}
	inNamespace = slices.Sorted(slices.Values(slices.Concat(clusterWide, []string{
		"create coordination.k8s.io/leases", "get /configmaps", "get coordination.k8s.io/leases",
		"list /configmaps", "update coordination.k8s.io/leases", "watch /configmaps",
		// BGP passwords: read only, this namespace only.
		"get /secrets", "list /secrets", "watch /secrets",
	})))
)

func TestIntegrationDeploy(t *testing.T) {
	s := apitest.Start(t)

	t.Run("server dry run", func(t *testing.T) {
		// Objects in a namespace that does not exist yet fail a dry run
		// (nothing is persisted, so the namespace never appears): create the
		// namespace first, as `kubectl apply -f namespace.yaml` would.
		mustKubectl(t, s, "apply", "-f", "namespace.yaml")
		out := mustKubectl(t, s, "apply", "--dry-run=server", "-k", ".")
		if n := strings.Count(out, "(server dry run)"); n != 10 {
			t.Errorf("dry run reported %d objects, want 10:\n%s", n, out)
		}
		if _, err := s.Client.AppsV1().DaemonSets(namespace).Get(t.Context(), "switchyard", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("DaemonSet after a dry run: err = %v, want NotFound", err)
		}
	})

	t.Run("the overlay of the local image changes only the image and names the API server", func(t *testing.T) {
		checkLocalOverlay(t, s)
	})

	mustKubectl(t, s, "apply", "-k", ".")
	// Applying again changes nothing: the manifests are what the server
	// stores (no defaulting fights).
	if out := mustKubectl(t, s, "apply", "--dry-run=server", "-k", "."); strings.Count(out, "unchanged") != 10 {
		t.Errorf("second apply is not a no-op:\n%s", out)
	}

	daemon := s.ServiceAccountConfig(t, namespace, "switchyard")
	client, err := kubernetes.NewForConfig(daemon)
	if err != nil {
		t.Fatal(err)
	}
	// A ServiceAccount with no bindings: what everyone may do anyway.
	nobody, err := kubernetes.NewForConfig(s.ServiceAccountConfig(t, namespace, "nobody"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("effective permissions are exactly the intended ones", func(t *testing.T) {
		for _, tc := range []struct {
			ns   string
			want []string
		}{
			{ns: namespace, want: inNamespace},
			{ns: "default", want: clusterWide},
		} {
			base := rules(t, nobody, tc.ns)
			got := slices.DeleteFunc(rules(t, client, tc.ns), func(r string) bool { return slices.Contains(base, r) })
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("permissions in %s (-want +got):\n%s", tc.ns, diff)
			}
		}
	})

	ctx := t.Context()
	app := s.Namespace(t)
	svc, err := s.Client.CoreV1().Services(app).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reads what it watches", func(t *testing.T) {
		checkReads(t, s.Client, client, app)
	})

	t.Run("writes Service status, Events and its Lease", func(t *testing.T) {
		got, err := client.CoreV1().Services(app).Get(ctx, svc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.10"}}
		if _, err := client.CoreV1().Services(app).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update services/status: %v", err)
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "lb."},
			InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: app, Name: svc.Name, UID: svc.UID},
			Reason:         "AllocationFailed", Message: "test", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "switchyard"},
		}
		if _, err := client.CoreV1().Events(app).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Errorf("create event: %v", err)
		}
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "switchyard-allocator"}}
		if _, err := client.CoordinationV1().Leases(namespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Errorf("create lease in %s: %v", namespace, err)
		}
	})

	t.Run("denied everything else", func(t *testing.T) {
		denials := daemonDenials(ctx, s.Client, client, app, svc.Name)
		for name, call := range denials {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("%s: err = %v, want Forbidden", name, err)
			}
		}
	})

	t.Run("kubectl auth can-i with the daemon's token", func(t *testing.T) {
		kc := s.WriteKubeconfig(t, daemon)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"watch", "services", "--all-namespaces"}, "yes"},
			{[]string{"watch", "endpointslices.discovery.k8s.io", "--all-namespaces"}, "yes"},
			{[]string{"watch", "nodes"}, "yes"},
			{[]string{"update", "services", "--subresource=status", "-n", app}, "yes"},
			{[]string{"update", "services", "-n", app}, "no"},
			{[]string{"get", "secrets", "-n", namespace}, "yes"},
			{[]string{"watch", "secrets", "-n", namespace}, "yes"},
			{[]string{"create", "secrets", "-n", namespace}, "no"},
			{[]string{"get", "secrets", "-n", "default"}, "no"},
			{[]string{"list", "secrets", "--all-namespaces"}, "no"},
			{[]string{"*", "*"}, "no"},
		} {
			out, err := s.Kubectl(t, append([]string{"--kubeconfig", kc, "auth", "can-i"}, tc.args...)...)
			if got := strings.TrimSpace(out); got != tc.want || (err == nil) != (tc.want == "yes") {
				t.Errorf("can-i %v = %q (err %v), want %q", tc.args, got, err, tc.want)
			}
		}
	})
}

// rules lists what the client may do in ns, per SelfSubjectRulesReview, as
// sorted "verb group/resource" strings.
func rules(t *testing.T, c kubernetes.Interface, ns string) []string {
	t.Helper()
	r, err := c.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectRulesReview in %s: %v", ns, err)
	}
	if r.Status.Incomplete {
		t.Fatalf("SelfSubjectRulesReview in %s is incomplete: %s", ns, r.Status.EvaluationError)
	}
	var out []string
	for _, rule := range r.Status.ResourceRules {
		if len(rule.ResourceNames) > 0 {
			t.Errorf("rule %+v is limited to resource names; the expectations here do not model that", rule)
		}
		for _, v := range rule.Verbs {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					out = append(out, fmt.Sprintf("%s %s/%s", v, g, res))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func mustKubectl(t *testing.T, s *apitest.Server, args ...string) string {
	t.Helper()
	out, err := s.Kubectl(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// daemonSets decodes the DaemonSets of a multi-document YAML stream.
func daemonSets(t *testing.T, stream string) []appsv1.DaemonSet {
	t.Helper()
	var out []appsv1.DaemonSet
	for doc := range strings.SplitSeq(stream, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "DaemonSet" {
			continue
		}
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
			t.Fatal(err)
		}
		out = append(out, ds)
	}
	return out
}

// checkLocalOverlay renders test/tools/image/deploy, the overlay of the
// local image: it changes only deploy/'s images and adds the ConfigMap
// naming the node lab's API server, and the server accepts it.
func checkLocalOverlay(t *testing.T, s *apitest.Server) {
	base := mustKubectl(t, s, "kustomize", ".")
	local := mustKubectl(t, s, "kustomize", "../test/tools/image/deploy")
	images := 0
	for _, ds := range daemonSets(t, local) {
		for _, c := range slices.Concat(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers) {
			images++
			if c.Image != localImage {
				t.Errorf("container %s: image %q, want %q (what make image tags)", c.Name, c.Image, localImage)
			}
		}
	}
	if images != 2 {
		t.Errorf("the overlay renders %d containers, want 2 (sysctls and switchyard)", images)
	}
	// It adds the ConfigMap that names the node lab's API server (the
	// one object a user writes for their cluster, deploy/daemonset.yaml);
	// everything else is deploy/ as it is.
	docs := strings.Split(local, "\n---\n")
	apiserver := slices.IndexFunc(docs, func(d string) bool {
		return strings.Contains(d, "kind: ConfigMap") && strings.Contains(d, "name: switchyard-apiserver")
	})
	if apiserver < 0 {
		t.Fatalf("the overlay renders no switchyard-apiserver ConfigMap:\n%s", local)
	}
	for _, kv := range []string{"host: 192.168.100.1", `port: "443"`} {
		if !strings.Contains(docs[apiserver], kv) {
			t.Errorf("switchyard-apiserver ConfigMap lacks %s:\n%s", kv, docs[apiserver])
		}
	}
	local = strings.Join(slices.Delete(docs, apiserver, apiserver+1), "\n---\n")
	want := strings.ReplaceAll(base, "image: switchyard:latest", "image: "+localImage)
	if diff := cmp.Diff(want, local); diff != "" {
		t.Errorf("overlay rendering without its ConfigMap (-deploy/ with the image replaced +the overlay):\n%s", diff)
	}
	out := mustKubectl(t, s, "apply", "--dry-run=server", "-k", "../test/tools/image/deploy")
	if n := strings.Count(out, "(server dry run)"); n != 11 {
		t.Errorf("dry run of the overlay reported %d objects, want 11 (deploy/'s 10 and the ConfigMap):\n%s", n, out)
	}
}

// daemonDenials are the calls the daemon's ServiceAccount (client) must be
// forbidden, by name; admin reads what a call needs.
func daemonDenials(ctx context.Context, admin, client kubernetes.Interface, app, svc string) map[string]func() error {
	return map[string]func() error{
		"update a Service's spec": func() error {
			got, err := admin.CoreV1().Services(app).Get(ctx, svc, metav1.GetOptions{})
			if err != nil {
				return err
			}
			got.Spec.Ports[0].Port = 81
			_, err = client.CoreV1().Services(app).Update(ctx, got, metav1.UpdateOptions{})
			return err
		},
		"delete a Service": func() error {
			return client.CoreV1().Services(app).Delete(ctx, svc, metav1.DeleteOptions{})
		},
		"create a Secret in its namespace": func() error {
			_, err := client.CoreV1().Secrets(namespace).Create(ctx,
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		},
		"update a Secret in its namespace": func() error {
			_, err := client.CoreV1().Secrets(namespace).Update(ctx,
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bgp-auth"}}, metav1.UpdateOptions{})
			return err
		},
		"delete a Secret in its namespace": func() error {
			return client.CoreV1().Secrets(namespace).Delete(ctx, "bgp-auth", metav1.DeleteOptions{})
		},
		"get secrets elsewhere": func() error {
			_, err := client.CoreV1().Secrets("kube-system").Get(ctx, "x", metav1.GetOptions{})
			return err
		},
		"list secrets in every namespace": func() error {
			_, err := client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list configmaps outside its namespace": func() error {
			_, err := client.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"create a lease outside its namespace": func() error {
			_, err := client.CoordinationV1().Leases("kube-system").Create(ctx,
				&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		},
		"write EndpointSlices": func() error {
			_, err := client.DiscoveryV1().EndpointSlices(app).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: "x"}, AddressType: discoveryv1.AddressTypeIPv4}, metav1.CreateOptions{})
			return err
		},
		"list pods": func() error {
			_, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		},
	}
}

// checkReads checks that the daemon's ServiceAccount (client) reads and
// watches what the daemon does: Services, EndpointSlices, Nodes, its
// config ConfigMap and a BGP password Secret by name; admin creates the
// EndpointSlice its watch should see in namespace app.
func checkReads(t *testing.T, admin, client kubernetes.Interface, app string) {
	ctx := t.Context()
	if _, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list services: %v", err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list endpointslices: %v", err)
	}
	if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list nodes: %v", err)
	}
	if _, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, "switchyard-config", metav1.GetOptions{}); err != nil {
		t.Errorf("get its config ConfigMap: %v", err)
	}
	// How the daemon reads a BGP password Secret: a watch on its name.
	byName := metav1.ListOptions{FieldSelector: "metadata.name=bgp-auth"}
	if _, err := client.CoreV1().Secrets(namespace).List(ctx, byName); err != nil {
		t.Errorf("list a Secret by name in %s: %v", namespace, err)
	}
	if w, err := client.CoreV1().Secrets(namespace).Watch(ctx, byName); err != nil {
		t.Errorf("watch a Secret by name in %s: %v", namespace, err)
	} else {
		w.Stop()
	}
	w, err := client.DiscoveryV1().EndpointSlices(app).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch endpointslices: %v", err)
	}
	defer w.Stop()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "lb-1", Labels: map[string]string{discoveryv1.LabelServiceName: "lb"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(app).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Errorf("watch event = %s %+v, want ADDED", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Error("no watch event for a new EndpointSlice within 30s")
	}
}

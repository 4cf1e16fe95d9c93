package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-lb/switchyard/core/config"
)

// kustomization is the part of kustomization.yaml the tests read.
type kustomization struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Resources          []string
	ConfigMapGenerator []struct {
		Name      string
		Namespace string
		Files     []string
		Literals  []string
		Options   struct {
			DisableNameSuffixHash bool              `json:"disableNameSuffixHash"`
			Labels                map[string]string `json:"labels"`
		}
	} `json:"configMapGenerator"`
	Images []struct {
		Name, NewName, NewTag string
	}
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	return k
}

// objects decodes every resource of the kustomization strictly (unknown or
// duplicate fields are errors) with the client-go scheme.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	decoder := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []runtime.Object
	for _, file := range readKustomization(t).Resources {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufioReader(data))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			out = append(out, obj)
		}
	}
	return out
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t)
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if f != "kustomization.yaml" && f != "config.yaml" {
			want = append(want, f)
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kustomization resources (-manifests in deploy/ +listed):\n%s", diff)
	}
	if len(k.ConfigMapGenerator) != 1 || !slices.Equal(k.ConfigMapGenerator[0].Files, []string{"config.yaml"}) {
		t.Errorf("configMapGenerator = %+v, want one generating from config.yaml", k.ConfigMapGenerator)
	}
}

func TestManifestsDecodeStrictly(t *testing.T) {
	kinds := map[string]int{}
	for _, obj := range objects(t) {
		kinds[obj.GetObjectKind().GroupVersionKind().Kind]++
	}
	want := map[string]int{
		"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1,
		"Role": 2, "RoleBinding": 2, "DaemonSet": 1,
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
}

// TestConfigSampleIsTheDefaults parses config.yaml with the daemon's own
// parser and checks that every value it spells out is the documented
// default (the IPVS dataplane included).
func TestConfigSampleIsTheDefaults(t *testing.T) {
	got, err := config.Load("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := config.Parse([]byte("apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\n"))
	if err != nil {
		t.Fatal(err)
	}
	opts := cmp.Options{cmpopts.EquateEmpty(), cmp.Comparer(func(a, b config.Prefix) bool { return a == b })}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("config.yaml differs from the defaults (-defaults +config.yaml):\n%s", diff)
	}
}

// TestDaemonSetMatchesConfig checks what the DaemonSet and the config must
// agree on: the config path, the health port the probes use, NODE_NAME.
func TestDaemonSetMatchesConfig(t *testing.T) {
	ds := daemonSet(t)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	cfg, err := config.Load("config.yaml")
	if err != nil {
		t.Fatal(err)
	}

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	configVolume := ""
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == readKustomization(t).ConfigMapGenerator[0].Name {
			configVolume = v.Name
		}
	}
	wantArg := "--config=" + mounts[configVolume].MountPath + "/config.yaml"
	if !slices.Contains(c.Args, wantArg) {
		t.Errorf("args = %v, want %s (the config ConfigMap's mount)", c.Args, wantArg)
	}

	_, portText, err := net.SplitHostPort(cfg.Health.BindAddress)
	if err != nil {
		t.Fatal(err)
	}
	healthPort, _ := strconv.Atoi(portText)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe is not an HTTP GET", name)
			continue
		}
		port := probe.HTTPGet.Port.IntVal
		if probe.HTTPGet.Port.StrVal != "" {
			port = ports[probe.HTTPGet.Port.StrVal]
		}
		if int(port) != healthPort {
			t.Errorf("%s probe port = %d, want the config's health port %d", name, port, healthPort)
		}
	}

	var nodeName *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "NODE_NAME" {
			nodeName = &c.Env[i]
		}
	}
	if nodeName == nil || nodeName.ValueFrom == nil || nodeName.ValueFrom.FieldRef == nil || nodeName.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v, want from fieldRef spec.nodeName", nodeName)
	}
}

// TestDaemonSetPrivileges guards the security-relevant fields against
// drift: these are deliberate decisions (see the comments in
// daemonset.yaml), not defaults.
func TestDaemonSetPrivileges(t *testing.T) {
	ds := daemonSet(t)
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	sc := c.SecurityContext
	type view struct {
		HostNetwork, HostPID, Privileged, AllowPrivilegeEscalation bool
		DNSPolicy                                                  corev1.DNSPolicy
		Priority, ServiceAccount                                   string
		Drop, Add                                                  []corev1.Capability
		TolerateEverything                                         bool
		ReadOnlyMounts                                             []string
		InitContainers                                             []initView
	}
	got := view{
		HostNetwork: spec.HostNetwork, HostPID: spec.HostPID,
		Privileged:               sc.Privileged != nil && *sc.Privileged,
		AllowPrivilegeEscalation: sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation,
		DNSPolicy:                spec.DNSPolicy, Priority: spec.PriorityClassName, ServiceAccount: spec.ServiceAccountName,
		Drop: sc.Capabilities.Drop, Add: sc.Capabilities.Add,
		TolerateEverything: slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool {
			return t.Key == "" && t.Operator == corev1.TolerationOpExists && t.Effect == ""
		}),
	}
	for _, m := range c.VolumeMounts {
		if m.ReadOnly {
			got.ReadOnlyMounts = append(got.ReadOnlyMounts, m.MountPath)
		}
	}
	for _, ic := range spec.InitContainers {
		got.InitContainers = append(got.InitContainers, initView{
			Name: ic.Name, SameImage: ic.Image == c.Image, Args: ic.Args,
			Privileged: ic.SecurityContext != nil && ic.SecurityContext.Privileged != nil && *ic.SecurityContext.Privileged,
		})
	}
	want := view{
		HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet,
		Priority: "system-node-critical", ServiceAccount: "switchyard",
		Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"},
		TolerateEverything: true,
		ReadOnlyMounts:     []string{"/etc/switchyard", "/lib/modules"},
		// The only privileged container: the daemon's container sees
		// /proc/sys read-only, so this one sets the dataplane's sysctls
		// once, with the daemon's binary and config, and exits.
		InitContainers: []initView{{
			Name: "sysctls", SameImage: true, Privileged: true,
			Args: []string{"--config=/etc/switchyard/config.yaml", "--set-sysctls"},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DaemonSet privileges (-want +got):\n%s", diff)
	}
}

// initView is what TestDaemonSetPrivileges pins of an init container.
type initView struct {
	Name                  string
	SameImage, Privileged bool
	Args                  []string
}

// TestRBACHasNoWildcardsOrSecrets guards the least-privilege rules against
// the easiest regressions: wildcards, aggregation, non-resource URLs, and
// Secrets beyond reading them in switchyard-system (one rule, of the Role
// switchyard-secrets, for BGP passwords). The integration test checks the
// effective permissions on a real API server.
func TestRBACHasNoWildcardsOrSecrets(t *testing.T) {
	secretRules := 0
	for _, obj := range objects(t) {
		var rules []rbacv1.PolicyRule
		role := ""
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			rules = o.Rules
			if o.AggregationRule != nil {
				t.Errorf("ClusterRole %s aggregates other roles", o.Name)
			}
		case *rbacv1.Role:
			rules = o.Rules
			role = o.Namespace + "/" + o.Name
		}
		for _, r := range rules {
			for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
				if s == "*" {
					t.Errorf("%T rule %+v has a wildcard", obj, r)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%T rule %+v grants non-resource URLs", obj, r)
			}
			if !slices.Contains(r.Resources, "secrets") {
				continue
			}
			secretRules++
			want := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}
			if role != "switchyard-system/switchyard-secrets" || !equality(r, want) {
				t.Errorf("%T %s rule %+v grants secrets; only Role switchyard-system/switchyard-secrets may, with exactly %+v", obj, role, r, want)
			}
		}
	}
	if secretRules != 1 {
		t.Errorf("%d rules grant secrets, want 1 (BGP passwords)", secretRules)
	}
}

// equality compares two rules field by field.
func equality(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) &&
		len(a.NonResourceURLs) == 0
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	for _, obj := range objects(t) {
		if ds, ok := obj.(*appsv1.DaemonSet); ok {
			if len(ds.Spec.Template.Spec.Containers) != 1 {
				t.Fatalf("DaemonSet has %d containers, want 1", len(ds.Spec.Template.Spec.Containers))
			}
			if ds.Spec.Template.Spec.Containers[0].SecurityContext == nil || ds.Spec.Template.Spec.Containers[0].SecurityContext.Capabilities == nil {
				t.Fatal("DaemonSet container has no securityContext.capabilities")
			}
			return ds
		}
	}
	t.Fatal("no DaemonSet in the kustomization")
	return nil
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

func bufioReader(data []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(data)) }

// localImage is the reference test/tools/image/deploy runs: the tag make image
// gives the image it builds.
const localImage = "switchyard:dev"

// TestLocalOverlayRunsTheImageMakeBuilds ties the overlay's image to the
// tag make image writes.
func TestLocalOverlayRunsTheImageMakeBuilds(t *testing.T) {
	data, err := os.ReadFile("../test/tools/image/deploy/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("test/tools/image/deploy/kustomization.yaml: %v", err)
	}
	if !slices.Equal(k.Resources, []string{"../../../../deploy"}) {
		t.Errorf("overlay resources %v: want deploy/ alone", k.Resources)
	}
	// Besides the image, only what a user adds: the API server's address
	// (the node lab's), in the ConfigMap daemonset.yaml reads it from.
	if g := k.ConfigMapGenerator; len(g) != 1 || g[0].Name != "switchyard-apiserver" || g[0].Namespace != "switchyard-system" ||
		!slices.Equal(g[0].Literals, []string{"host=192.168.100.1", "port=443"}) || !g[0].Options.DisableNameSuffixHash {
		t.Errorf("overlay generators %+v: want switchyard-apiserver with the node lab's host and port", g)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "switchyard" || k.Images[0].NewName != "" {
		t.Fatalf("overlay images = %+v, want one setting the tag of switchyard", k.Images)
	}
	if got := k.Images[0].Name + ":" + k.Images[0].NewTag; got != localImage {
		t.Errorf("overlay image = %s, want %s", got, localImage)
	}
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(makefile), "-tag "+localImage+" ") {
		t.Errorf("the Makefile's image target does not tag %s", localImage)
	}
}

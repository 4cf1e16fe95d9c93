package node

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestDNSManifest decodes the DNS add-on as kubectl would and checks the
// addresses it was given: the Service at the kubelet's clusterDNS, CoreDNS
// talking to the API server directly, the image the node imports.
func TestDNSManifest(t *testing.T) {
	d := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(dnsManifest()), 4096)
	var kinds []string
	var svc corev1.Service
	var dep appsv1.Deployment
	for {
		var obj map[string]any
		err := d.Decode(&obj)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		kind, _ := obj["kind"].(string)
		kinds = append(kinds, kind)
	}
	want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	docs := strings.Split(dnsManifest(), "\n---\n")
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(docs[len(docs)-1]), 4096).Decode(&svc); err != nil {
		t.Fatal(err)
	}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(docs[len(docs)-2]), 4096).Decode(&dep); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != ClusterDNSIP {
		t.Errorf("kube-dns clusterIP %q, want %q", svc.Spec.ClusterIP, ClusterDNSIP)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != CoreDNSImage {
		t.Errorf("image %q, want %q", c.Image, CoreDNSImage)
	}
	wantEnv := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: HostIP}, {Name: "KUBERNETES_SERVICE_PORT", Value: "443"}}
	if diff := cmp.Diff(wantEnv, c.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

// TestCoreDNSPlugins: kube-binaries.sh --coredns builds CoreDNS with the
// plugins of this Corefile only, so every directive the Corefile uses must
// be one of the plugins its main imports (CoreDNS refuses an unknown
// directive and the node's DNS never turns Ready).
func TestCoreDNSPlugins(t *testing.T) {
	script, err := os.ReadFile("../tools/kube-binaries.sh")
	if err != nil {
		t.Fatal(err)
	}
	// The directive of each plugin package whose name differs.
	directive := map[string]string{"metrics": "prometheus"}
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`"github.com/coredns/coredns/plugin/([a-z0-9]+)"`).FindAllStringSubmatch(string(script), -1) {
		d := m[1]
		if alias, ok := directive[d]; ok {
			d = alias
		}
		built[d] = true
	}
	if len(built) == 0 {
		t.Fatal("kube-binaries.sh imports no CoreDNS plugin")
	}
	var cm corev1.ConfigMap
	for _, doc := range strings.Split(dnsManifest(), "\n---\n") {
		if strings.Contains(doc, "kind: ConfigMap") {
			if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	used := corefileDirectives(cm.Data["Corefile"])
	if len(used) == 0 {
		t.Fatalf("no directive found in the Corefile:\n%s", cm.Data["Corefile"])
	}
	for _, d := range used {
		if !built[d] {
			t.Errorf("the Corefile uses %q, which kube-binaries.sh's CoreDNS does not import", d)
		}
	}
}

// corefileDirectives returns the directives of a Corefile's server blocks:
// the first word of each line directly inside a block.
func corefileDirectives(corefile string) []string {
	var ds []string
	depth := 0
	for _, line := range strings.Split(corefile, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if depth == 1 && f[0] != "}" {
			ds = append(ds, f[0])
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
	}
	return ds
}

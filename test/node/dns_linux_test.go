package node

import (
	"errors"
	"io"
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

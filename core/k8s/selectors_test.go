package k8s

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// TestServiceListOptions checks what each Service watch asks the API
// server for, and that, together, the watches select a Service exactly
// when it has no service-proxy-name label or names this proxy, never
// twice, and never a headless one.
func TestServiceListOptions(t *testing.T) {
	const notHeadless = "spec.clusterIP!=None"
	if diff := cmp.Diff([]metav1.ListOptions{
		{LabelSelector: "!service.kubernetes.io/service-proxy-name", FieldSelector: notHeadless},
		{LabelSelector: "service.kubernetes.io/service-proxy-name=switchyard", FieldSelector: notHeadless},
	}, serviceListOptions("switchyard")); diff != "" {
		t.Errorf("serviceListOptions(switchyard) (-want +got):\n%s", diff)
	}

	tests := []struct {
		name      string
		proxy     string
		labels    labels.Set
		clusterIP string
		want      int // watches selecting the Service
	}{
		{name: "unlabelled", proxy: "switchyard", want: 1},
		{name: "names us", proxy: "switchyard", labels: labels.Set{LabelServiceProxyName: "switchyard"}, want: 1},
		{name: "names another proxy", proxy: "switchyard", labels: labels.Set{LabelServiceProxyName: "kube-proxy"}, want: 0},
		{name: "empty name is a name", proxy: "switchyard", labels: labels.Set{LabelServiceProxyName: ""}, want: 0},
		{name: "other labels do not matter", proxy: "switchyard", labels: labels.Set{"app": "web"}, want: 1},
		{name: "headless", proxy: "switchyard", clusterIP: "None", want: 0},
		{name: "no name: unlabelled", want: 1},
		{name: "no name: any name is another proxy's", labels: labels.Set{LabelServiceProxyName: "switchyard"}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clusterIP := tt.clusterIP
			if clusterIP == "" {
				clusterIP = "10.96.0.10"
			}
			got := 0
			for _, o := range serviceListOptions(tt.proxy) {
				ls, err := labels.Parse(o.LabelSelector)
				if err != nil {
					t.Fatal(err)
				}
				fs, err := fields.ParseSelector(o.FieldSelector)
				if err != nil {
					t.Fatal(err)
				}
				if ls.Matches(tt.labels) && fs.Matches(fields.Set{"spec.clusterIP": clusterIP}) {
					got++
				}
			}
			if got != tt.want {
				t.Errorf("selected by %d watches, want %d", got, tt.want)
			}
		})
	}
}

func TestSliceListOptions(t *testing.T) {
	o := sliceListOptions()
	if diff := cmp.Diff(metav1.ListOptions{LabelSelector: "!service.kubernetes.io/headless"}, o); diff != "" {
		t.Errorf("sliceListOptions (-want +got):\n%s", diff)
	}
	ls, err := labels.Parse(o.LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		labels labels.Set
		want   bool
	}{
		{labels.Set{"kubernetes.io/service-name": "web"}, true},
		{labels.Set{"kubernetes.io/service-name": "web", LabelHeadless: ""}, false},
		// Slices of another proxy's Service are watched, as kube-proxy
		// watches them: their Service is not.
		{labels.Set{"kubernetes.io/service-name": "web", LabelServiceProxyName: "other"}, true},
	} {
		if got := ls.Matches(tt.labels); got != tt.want {
			t.Errorf("slice labelled %v selected: %v, want %v", tt.labels, got, tt.want)
		}
	}
}

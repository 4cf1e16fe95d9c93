package k8s

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
)

// TestDropUnread: the cache's transform drops the managed fields, owner
// references, kubectl's last applied configuration, an EndpointSlice
// endpoint's target, hostname and topology, and a Node's images and volumes,
// and keeps everything the conversions read: each object converts to
// the same model before and after it, twice (it is idempotent).
func TestDropUnread(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:ports":{}}}`)}}
	meta := func(m metav1.ObjectMeta) metav1.ObjectMeta {
		m.ManagedFields = managed
		m.Annotations[annotationLastApplied] = `{"apiVersion":"v1","kind":"Service"}`
		return m
	}

	svc := k8stest.Service("ns", "web", "10.96.0.10")
	svc.ObjectMeta = meta(metav1.ObjectMeta{Namespace: "ns", Name: "web",
		Annotations: map[string]string{AnnotationPolicy: "builtin:local-first", AnnotationScheduler: "wrr"}})
	slice := k8stest.Slice("ns", "web-1", "web", true, "10.0.0.1")
	slice.Annotations = map[string]string{annotationTriggerTime: "2026-12-03T21:00:00Z"}
	slice.ObjectMeta = meta(slice.ObjectMeta)
	slice.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "5d2f"}}
	slice.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-7c9d-x2x4q", UID: "9a1e"}
	slice.Endpoints[0].Hostname = ptr("web-0")
	slice.Endpoints[0].DeprecatedTopology = map[string]string{"kubernetes.io/hostname": "n1"}
	node := &corev1.Node{
		ObjectMeta: meta(metav1.ObjectMeta{Name: "n1", Labels: map[string]string{labelZone: "z1"}, Annotations: map[string]string{}}),
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
		Status: corev1.NodeStatus{
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.1.10"}},
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:          []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 320000}},
			VolumesInUse:    []corev1.UniqueVolumeName{"kubernetes.io/csi/x"},
			VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/x", DevicePath: "/dev/sdb"}},
		},
	}

	wantSvc, _ := convertService(svc)
	wantEps, _ := convertSlice(slice)
	wantKey, _ := sliceService(slice)
	wantTrigger := triggerTime(slice)
	wantNode, _ := convertNode(node)
	for range 2 {
		for _, obj := range []any{svc, slice, node} {
			if _, err := dropUnread(obj); err != nil {
				t.Fatalf("dropUnread(%T): %v", obj, err)
			}
		}
	}

	gotSvc, _ := convertService(svc)
	gotEps, _ := convertSlice(slice)
	gotKey, _ := sliceService(slice)
	gotNode, _ := convertNode(node)
	for _, c := range []struct {
		what      string
		want, got any
	}{
		{"Service", wantSvc, gotSvc},
		{"EndpointSlice endpoints", wantEps, gotEps},
		{"EndpointSlice's Service", wantKey, gotKey},
		{"EndpointSlice trigger time", wantTrigger, triggerTime(slice)},
		{"Node", wantNode, gotNode},
	} {
		if diff := cmp.Diff(c.want, c.got, deltaOpts...); diff != "" {
			t.Errorf("%s converted after the transform (-before +after):\n%s", c.what, diff)
		}
	}
	if wantTrigger.Equal(time.Time{}) {
		t.Errorf("the test's trigger time did not parse")
	}

	dropped := map[string]int{
		"Service managed fields": len(svc.ManagedFields), "EndpointSlice managed fields": len(slice.ManagedFields),
		"Node managed fields": len(node.ManagedFields), "Node images": len(node.Status.Images),
		"Node volumes in use": len(node.Status.VolumesInUse), "Node volumes attached": len(node.Status.VolumesAttached),
		"EndpointSlice owner references": len(slice.OwnerReferences),
	}
	if ep := slice.Endpoints[0]; ep.TargetRef != nil || ep.Hostname != nil || ep.DeprecatedTopology != nil {
		dropped["EndpointSlice endpoint's target, hostname or topology"]++
	}
	for _, a := range []map[string]string{svc.Annotations, node.Annotations} {
		if _, ok := a[annotationLastApplied]; ok {
			dropped["last applied configuration"]++
		}
	}
	if diff := cmp.Diff(map[string]int{
		"Service managed fields": 0, "EndpointSlice managed fields": 0, "Node managed fields": 0, "Node images": 0,
		"Node volumes in use": 0, "Node volumes attached": 0, "EndpointSlice owner references": 0,
	}, dropped); diff != "" {
		t.Errorf("left after the transform (-want +got):\n%s", diff)
	}
}

//go:build integration

package registry_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/test/apitest"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// TestIntegrationReporter writes the PolicyReady condition and Events to a
// real API server: the condition is merged by type (another controller's
// condition stays), follows changes, and a gone Service is not an error.
func TestIntegrationReporter(t *testing.T) {
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx := t.Context()
	services := srv.Client.CoreV1().Services(ns)
	svc, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := metav1.Condition{Type: "example.com/Other", Status: metav1.ConditionTrue, Reason: "Fine", LastTransitionTime: metav1.Now()}
	svc.Status.Conditions = []metav1.Condition{other}
	if _, err := services.UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: srv.Client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "switchyard", Host: "node-a"})
	rep := registry.NewReporter(srv.Client, recorder, registry.ReporterOptions{NodeName: "node-a"}, nil)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); rep.Run(rctx) }()
	defer func() { cancel(); <-done }()

	key := model.ServiceKey{Namespace: ns, Name: "web"}
	waitCondition := func(status metav1.ConditionStatus, reason, message string) {
		t.Helper()
		harness.Poll(t, waitLimit, func() error {
			got, err := services.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(got.Status.Conditions, func(c metav1.Condition) bool { return c.Type == registry.ConditionPolicyReady })
			hasOther := slices.ContainsFunc(got.Status.Conditions, func(c metav1.Condition) bool { return c.Type == other.Type })
			if i >= 0 && hasOther {
				c := got.Status.Conditions[i]
				if c.Status == status && c.Reason == reason && c.Message == message {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v, want %s=%s %s %q next to %s", got.Status.Conditions, registry.ConditionPolicyReady, status, reason, message, other.Type)
		})
	}
	rep.PolicyCondition(key, false, "LoadFailed", "policy zone: policy not found")
	rep.PolicyEvent(key, "PolicyFailed", "policy zone: policy not found")
	waitCondition(metav1.ConditionFalse, "LoadFailed", "node node-a: policy zone: policy not found")
	rep.PolicyCondition(key, true, "Evaluated", "policy zone evaluated")
	waitCondition(metav1.ConditionTrue, "Evaluated", "node node-a: policy zone evaluated")

	var failed corev1.Event
	harness.Poll(t, waitLimit, func() error {
		evs, err := srv.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(evs.Items, func(e corev1.Event) bool { return e.Reason == "PolicyFailed" })
		if i < 0 {
			return fmt.Errorf("no PolicyFailed event among %d", len(evs.Items))
		}
		failed = evs.Items[i]
		return nil
	})
	if e := failed; e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Service" || e.InvolvedObject.Name != "web" || !strings.Contains(e.Message, "policy not found") {
		t.Errorf("event %+v", e)
	}

	// A condition for a Service that is gone is dropped, not retried forever.
	rep.PolicyCondition(model.ServiceKey{Namespace: ns, Name: "gone"}, false, "LoadFailed", "x")
	rep.PolicyCondition(key, false, "Trapped", "policy zone: trap")
	waitCondition(metav1.ConditionFalse, "Trapped", "node node-a: policy zone: trap")
}

//go:build integration

package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationE2EHealthzNodeDeletion follows KEP-3836 against the real
// API server: /healthz fails while this node's Node carries the cluster
// autoscaler's ToBeDeletedByClusterAutoscaler taint, recovers when the
// taint goes, fails again once the Node has a deletionTimestamp (a
// finalizer holds it) and stays failed when the Node is gone. /livez
// answers 200 throughout, and the daemon keeps serving its table.
func TestIntegrationE2EHealthzNodeDeletion(t *testing.T) {
	srv := apitest.Start(t)
	createNode(t, srv.Client, "node-a", "192.168.0.10")
	d := startE2E(t, srv.Admin, "node-a", "")
	d.waitReady(t, 60*time.Second)
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	patch := func(p any) {
		t.Helper()
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Client.CoreV1().Nodes().Patch(t.Context(), "node-a", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch Node node-a with %s: %v", b, err)
		}
	}
	patch(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{
		{Key: "ToBeDeletedByClusterAutoscaler", Value: "1764633600", Effect: corev1.TaintEffectNoSchedule}}}})
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	patch(map[string]any{"spec": map[string]any{"taints": nil}})
	waitHealthz(t, d.tc.Health, http.StatusOK, true)

	patch(map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}})
	if err := srv.Client.CoreV1().Nodes().Delete(t.Context(), "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	patch(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	poll(t, 60*time.Second, func() error {
		_, err := srv.Client.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
		if err == nil {
			return errors.New("the Node is still there")
		}
		return nil
	})
	// A Service created now is applied by a sync after the deletion.
	createAll(t, srv.Client, "default", []*corev1.Service{e2eService("late")}, nil)
	poll(t, 60*time.Second, func() error {
		st, err := d.applied("default")
		if err != nil {
			return err
		}
		if _, ok := st["late"]; !ok {
			return errors.New("default/late not applied yet")
		}
		return nil
	})
	waitHealthz(t, d.tc.Health, http.StatusServiceUnavailable, false)
	if code, body := d.readyz(); code != http.StatusOK {
		t.Errorf("/readyz with the Node gone = %d %q, want 200: readiness does not follow the Node", code, body)
	}
}

//go:build integration

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/plugins/registry"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationPolicyLastGoodAcrossRestart: a daemon restarted while
// its Service's policy ConfigMap is broken keeps balancing with the last
// good version it kept in policies.cacheDir, and says so on the Service;
// without it, the Service would fall back to uniform weights.
func TestIntegrationPolicyLastGoodAcrossRestart(t *testing.T) {
	module := zoneAwareModule(t)
	srv := apitest.Start(t)
	ns := srv.Namespace(t)
	ctx, client := t.Context(), srv.Client
	first := startPolicyDaemon(t, srv, "policies:\n  statisticsInterval: 1h\n  cacheDir: "+t.TempDir()+"\n")
	tc := first.tc

	createZonedService(t, client, ns, "web", "zone")
	cms := client.CoreV1().ConfigMaps(registry.DefaultNamespace)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "zone", Labels: map[string]string{registry.Label: "true"}},
		BinaryData: map[string][]byte{registry.KeyModuleGzip: gzipBytes(t, module)},
		Data:       map[string]string{registry.KeyPin: registry.Digest(module), registry.KeyParams: `{"localWeight": 7}`},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good := cm.ResourceVersion
	const zoneAware = "wrr 10.1.0.1:8080=7 10.1.0.2:8080=0"
	waitWeights := func(step string) {
		t.Helper()
		poll(t, 2*time.Minute, func() error {
			got, err := weights(tc.Metrics, "web")
			if err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			if got != zoneAware {
				return fmt.Errorf("%s: web's weights %q, want %q", step, got, zoneAware)
			}
			return nil
		})
	}
	waitWeights("loaded")
	first.finishUnchecked(t)

	// Broken while no daemon runs.
	cm.BinaryData = map[string][]byte{registry.KeyModule: []byte("garbage, not a module")}
	cm.Data = map[string]string{registry.KeyParams: `{"localWeight": 9}`}
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := startMain(t, srv.Kubeconfig, "node-a", tc, "--v=2")
	t.Cleanup(func() { second.finishUnchecked(t) })
	waitWeights("restarted on a broken ConfigMap")
	wantMsg := "kept on this node's disk from revision " + good
	poll(t, 2*time.Minute, func() error {
		svc, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(svc.Status.Conditions, func(c metav1.Condition) bool { return c.Type == registry.ConditionPolicyReady })
		if i < 0 || svc.Status.Conditions[i].Reason != "LoadFailed" || !strings.Contains(svc.Status.Conditions[i].Message, wantMsg) {
			return fmt.Errorf("web's conditions %+v, want %s LoadFailed saying %q", svc.Status.Conditions, registry.ConditionPolicyReady, wantMsg)
		}
		return nil
	})
}

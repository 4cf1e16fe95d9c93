//go:build integration

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/k8s"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/test/apitest"
)

// TestIntegrationDaemonServiceProxyName runs the daemon with
// serviceProxyName: edge against a real API server: an unlabelled Service
// and one labelled for edge are planned, one labelled for another proxy is
// not until it is relabelled for edge, and the endpoints of a slice
// labelled service.kubernetes.io/headless never reach the plan. A reload
// that changes serviceProxyName is logged as needing a restart.
func TestIntegrationDaemonServiceProxyName(t *testing.T) {
	srv := apitest.Start(t)
	ns, ctx, client := srv.Namespace(t), t.Context(), srv.Client
	tc := writeTestConfig(t, "serviceProxyName: edge\n")
	d := startMain(t, srv.Kubeconfig, "node-a", tc)
	defer d.finishUnchecked(t)

	ips := map[string]string{}
	for name, proxy := range map[string]string{"plain": "", "mine": "edge", "theirs": "kube-proxy", "hl": ""} {
		svc := k8stest.Service(ns, name, "")
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		if proxy != "" {
			svc.Labels = map[string]string{k8s.LabelServiceProxyName: proxy}
		}
		created, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ips[name] = created.Spec.ClusterIP
		slice := k8stest.Slice(ns, name+"-abc", name, true, "10.1.0.1")
		if name == "hl" {
			slice.Labels[k8s.LabelHeadless] = ""
		}
		if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	line := func(name string, dests string) string {
		return fmt.Sprintf("%s/%s ClusterIP TCP %s:80 rr ->%s", ns, name, ips[name], dests)
	}
	waitPlan := func(what string, want ...string) {
		t.Helper()
		poll(t, 2*time.Minute, func() error {
			st, err := getState(tc.Metrics)
			if err != nil {
				return err
			}
			var got []string
			for _, l := range vsSummary(st) {
				if strings.HasPrefix(l, ns+"/") {
					got = append(got, l)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s: plan %q, want %q", what, got, want)
			}
			return nil
		})
	}
	waitPlan("another proxy's Service left out, the headless slice ignored",
		line("plain", " 10.1.0.1:8080"), line("mine", " 10.1.0.1:8080"), line("hl", ""))

	theirs, err := client.CoreV1().Services(ns).Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Labels[k8s.LabelServiceProxyName] = "edge"
	if _, err := client.CoreV1().Services(ns).Update(ctx, theirs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPlan("relabelled for edge",
		line("plain", " 10.1.0.1:8080"), line("mine", " 10.1.0.1:8080"), line("theirs", " 10.1.0.1:8080"), line("hl", ""))

	tc.Write(t, "serviceProxyName: other\n")
	poll(t, 2*time.Minute, func() error {
		if !strings.Contains(d.Logs.String(), "take effect at the next restart") ||
			!strings.Contains(d.Logs.String(), "serviceProxyName") {
			return fmt.Errorf("no restart-needed log for serviceProxyName")
		}
		return nil
	})
}

//go:build integration

package apitest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchyard-lb/switchyard/test/harness"
)

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func whoami(t *testing.T, c kubernetes.Interface) authenticationv1.UserInfo {
	t.Helper()
	r, err := c.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo
}

func TestIntegrationServer(t *testing.T) {
	s := Start(t)
	ctx := t.Context()
	ns := s.Namespace(t)

	t.Run("admin is system:masters", func(t *testing.T) {
		if got := whoami(t, s.Client); !contains(got.Groups, "system:masters") {
			t.Errorf("admin groups = %v, want system:masters", got.Groups)
		}
	})

	t.Run("dual-stack ClusterIP allocation", func(t *testing.T) {
		policy := corev1.IPFamilyPolicyRequireDualStack
		svc, err := s.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				IPFamilyPolicy: &policy,
				Ports:          []corev1.ServicePort{{Port: 80}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		if diff := cmp.Diff(want, svc.Spec.IPFamilies); diff != "" {
			t.Errorf("ipFamilies (-want +got):\n%s", diff)
		}
		if len(svc.Spec.ClusterIPs) != 2 || !strings.HasPrefix(svc.Spec.ClusterIPs[0], "10.96.") || !strings.HasPrefix(svc.Spec.ClusterIPs[1], "fd00:10:96::") {
			t.Errorf("clusterIPs = %v, want one in 10.96.0.0/16 and one in fd00:10:96::/108", svc.Spec.ClusterIPs)
		}
	})

	t.Run("RBAC applies to certificate users", func(t *testing.T) {
		alice := clientFor(t, s.UserConfig(t, "alice", "team-a"))
		if got := whoami(t, alice); got.Username != "alice" || !contains(got.Groups, "team-a") {
			t.Errorf("whoami = %+v, want alice in team-a", got)
		}
		_, err := alice.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("alice lists services before any grant: err = %v, want Forbidden", err)
		}
		grant(t, s.Client, ns, "team-a", rbacv1.GroupKind)
		harness.Poll(t, 2*time.Minute, func() error {
			_, err := alice.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			return err
		})
		if _, err := alice.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("alice lists secrets: err = %v, want Forbidden", err)
		}
	})

	t.Run("ServiceAccount token", func(t *testing.T) {
		cfg := s.ServiceAccountConfig(t, "sa-ns", "reader")
		sa := clientFor(t, cfg)
		want := "system:serviceaccount:sa-ns:reader"
		if got := whoami(t, sa); got.Username != want {
			t.Fatalf("token user = %q, want %q", got.Username, want)
		}
		if _, err := sa.CoreV1().Services("sa-ns").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("ServiceAccount lists services before any grant: err = %v, want Forbidden", err)
		}
		grant(t, s.Client, "sa-ns", "reader", rbacv1.ServiceAccountKind)
		harness.Poll(t, 2*time.Minute, func() error {
			_, err := sa.CoreV1().Services("sa-ns").List(ctx, metav1.ListOptions{})
			return err
		})
		// A second call reuses the ServiceAccount and returns a fresh token.
		if got := whoami(t, clientFor(t, s.ServiceAccountConfig(t, "sa-ns", "reader"))); got.Username != want {
			t.Errorf("second token user = %q, want %q", got.Username, want)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		out, err := s.Kubectl(t, "get", "namespace", ns, "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(out), "namespace/"+ns; got != want {
			t.Errorf("kubectl get namespace = %q, want %q", got, want)
		}
		kc := s.WriteKubeconfig(t, s.UserConfig(t, "bob"))
		out, err = s.Kubectl(t, "--kubeconfig", kc, "auth", "can-i", "list", "services", "-n", ns)
		if err == nil || strings.TrimSpace(out) != "no" {
			t.Errorf("bob can-i list services = %q, %v; want \"no\" and an error", out, err)
		}
		if _, err := s.Kubectl(t, "get", "nosuchkind"); err == nil || !strings.Contains(err.Error(), "nosuchkind") {
			t.Errorf("kubectl get nosuchkind: err = %v, want an error naming it", err)
		}
	})
}

func TestIntegrationRestartAPIServer(t *testing.T) {
	s := Start(t)
	ctx := t.Context()
	ns := s.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := s.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user := s.UserConfig(t, "carol")
	url := s.URL

	began := time.Now()
	s.StopAPIServer(t)
	stopped := time.Since(began)
	if _, err := s.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("API server answers after StopAPIServer")
	}
	began = time.Now()
	s.StartAPIServer(t)
	t.Logf("kube-apiserver stopped in %s, restarted in %s", stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

	if s.URL != url {
		t.Errorf("URL changed across restart: %s -> %s", url, s.URL)
	}
	got, err := s.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap after restart: %v", err)
	}
	if diff := cmp.Diff(cm.Data, got.Data); diff != "" {
		t.Errorf("ConfigMap data after restart (-want +got):\n%s", diff)
	}
	// Certificates issued before the restart still authenticate.
	if u := whoami(t, clientFor(t, user)); u.Username != "carol" {
		t.Errorf("user after restart = %q, want carol", u.Username)
	}
}

// grant lets a group or ServiceAccount read Services in namespace. (The
// aggregated "view" ClusterRole is empty here: aggregation is done by the
// controller manager, which does not run.)
func grant(t *testing.T, c kubernetes.Interface, namespace, name, kind string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "read-services-" + strings.ToLower(name)},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := c.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Role: %v", err)
	}
	subject := rbacv1.Subject{Kind: kind, Name: name}
	switch kind {
	case rbacv1.ServiceAccountKind:
		subject.Namespace = namespace
	default:
		subject.APIGroup = rbacv1.GroupName
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := c.RbacV1().RoleBindings(namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("grant %s to %s %s: %v", role.Name, kind, name, err)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

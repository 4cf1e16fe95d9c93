package k8s

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Labels honoured as kube-proxy honours them.
const (
	// LabelServiceProxyName on a Service names the proxy that serves it;
	// every other proxy leaves the Service alone. The EndpointSlice
	// controller copies it onto the Service's slices.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless is set by the EndpointSlice controller on the slices
	// of a headless Service: DNS serves those, no proxy does.
	LabelHeadless = corev1.IsHeadlessService
)

// serviceListOptions returns the selectors of the Service watches, one
// watch each, so that the API server sends only the Services this proxy
// serves. kube-proxy, which has no name, watches Services without the
// service-proxy-name label; a proxy with a name also watches those that
// carry its name (a label selector cannot say "absent or equal", hence
// two watches). Both leave headless Services out (spec.clusterIP None):
// DNS serves them.
func serviceListOptions(proxyName string) []metav1.ListOptions {
	notHeadless := fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	out := []metav1.ListOptions{{
		LabelSelector: selector(LabelServiceProxyName, selection.DoesNotExist),
		FieldSelector: notHeadless,
	}}
	if proxyName != "" {
		out = append(out, metav1.ListOptions{
			LabelSelector: selector(LabelServiceProxyName, selection.Equals, proxyName),
			FieldSelector: notHeadless,
		})
	}
	return out
}

// sliceListOptions returns the selector of the EndpointSlice watch: as
// kube-proxy's, every slice but those of headless Services. The slices of
// Services left to another proxy are watched (their Service is not, so
// they program nothing), as kube-proxy watches them.
func sliceListOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: selector(LabelHeadless, selection.DoesNotExist)}
}

// selector renders one label requirement. The keys and operators are
// constants and a proxy name is validated by the config, so a failure is
// a programming error.
func selector(key string, op selection.Operator, values ...string) string {
	r, err := labels.NewRequirement(key, op, values)
	if err != nil {
		panic("k8s: label selector: " + err.Error())
	}
	return labels.NewSelector().Add(*r).String()
}

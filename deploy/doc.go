// Package deploy holds the Kubernetes manifests that install switchyard as a
// DaemonSet in place of kube-proxy (kubectl apply -k deploy/): the
// switchyard-system Namespace, the ServiceAccount, least-privilege RBAC, the
// DaemonSet and the config ConfigMap generated from config.yaml.
//
// The Go files are tests only: the unit tests decode every manifest
// strictly and parse config.yaml with core/config; the integration tests
// (build tag integration) apply the kustomization to a real API server and
// check what the ServiceAccount's token may and may not do.
package deploy

// Package pki owns the throwaway public-key infrastructure of the test API
// servers (test/apitest's and test/node's control plane): a certificate authority, the serving certificate, client
// certificates for any user and groups, and the service-account signing key.
//
// Keys are ECDSA P-256, which kube-apiserver accepts for TLS, client
// certificates and ES256 service-account tokens, and which is fast to
// generate. Everything is returned PEM-encoded, ready to write to files or to
// put in a rest.Config.
package pki

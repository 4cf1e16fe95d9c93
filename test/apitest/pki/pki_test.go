package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatalf("no PEM block in %q", certPEM)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestIssueClient(t *testing.T) {
	ca := newCA(t)
	tests := []struct {
		name   string
		user   string
		groups []string
	}{
		{name: "admin", user: "admin", groups: []string{"system:masters"}},
		{name: "no groups", user: "alice"},
		{name: "service account style name", user: "system:serviceaccount:ns:sa", groups: []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := ca.IssueClient(tc.user, tc.groups)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM); err != nil {
				t.Fatalf("certificate and key do not match: %v", err)
			}
			cert := parse(t, pair.CertPEM)
			got := struct {
				User   string
				Groups []string
			}{cert.Subject.CommonName, cert.Subject.Organization}
			want := struct {
				User   string
				Groups []string
			}{tc.user, tc.groups}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("subject (-want +got):\n%s", diff)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(ca.CertPEM)
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client certificate does not verify for client auth: %v", err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
				t.Errorf("client certificate verifies for server auth, want rejected")
			}
		})
	}
}

func TestIssueClientEmptyUser(t *testing.T) {
	if _, err := newCA(t).IssueClient("", nil); err == nil {
		t.Fatal("IssueClient(\"\") succeeded, want error")
	}
}

func TestIssueServer(t *testing.T) {
	ca := newCA(t)
	pair, err := ca.IssueServer("kube-apiserver", []string{"127.0.0.1", "::1", "localhost", "kubernetes.default.svc"})
	if err != nil {
		t.Fatal(err)
	}
	cert := parse(t, pair.CertPEM)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	tests := []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"::1", true},
		{"localhost", true},
		{"kubernetes.default.svc", true},
		{"10.0.0.1", false},
		{"example.invalid", false},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host})
			if gotOK := err == nil; gotOK != tc.ok {
				t.Errorf("Verify(%s) error = %v, want ok=%v", tc.host, err, tc.ok)
			}
		})
	}
}

func TestIssuedByOtherCAFails(t *testing.T) {
	pair, err := newCA(t).IssueClient("alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(newCA(t).CertPEM)
	if _, err := parse(t, pair.CertPEM).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Fatal("certificate verified against an unrelated CA")
	}
}

func TestNewSigningKey(t *testing.T) {
	pubPEM, privPEM, err := NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := pem.Decode(pubPEM)
	kb, _ := pem.Decode(privPEM)
	if pb == nil || kb == nil {
		t.Fatal("signing key is not PEM")
	}
	pub, err := x509.ParsePKIXPublicKey(pb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !priv.PublicKey.Equal(pub.(*ecdsa.PublicKey)) {
		t.Fatal("public key does not belong to the private key")
	}
}

package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Validity is how long issued certificates stay valid. Long enough for a
// demo left running; the PKI lives only as long as its server.
const Validity = 365 * 24 * time.Hour

// Pair is a PEM-encoded certificate and its private key.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// CA is a self-signed certificate authority that issues serving and client
// certificates.
type CA struct {
	CertPEM []byte
	cert    *x509.Certificate
	key     crypto.Signer
}

// NewCA creates a self-signed certificate authority named commonName.
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA %q: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{CertPEM: encode("CERTIFICATE", der), cert: cert, key: key}, nil
}

// IssueServer issues a serving certificate for hosts, each an IP address or
// a DNS name.
func (ca *CA) IssueServer(commonName string, hosts []string) (Pair, error) {
	tmpl, err := template(pkix.Name{CommonName: commonName})
	if err != nil {
		return Pair{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// IssueClient issues a client certificate that kube-apiserver's x509
// authenticator maps to user (the common name) in groups (the
// organizations).
func (ca *CA) IssueClient(user string, groups []string) (Pair, error) {
	if user == "" {
		return Pair{}, fmt.Errorf("issue client certificate: empty user name")
	}
	tmpl, err := template(pkix.Name{CommonName: user, Organization: groups})
	if err != nil {
		return Pair{}, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func (ca *CA) issue(tmpl *x509.Certificate) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generate key for %q: %w", tmpl.Subject.CommonName, err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("sign certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: encode("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// NewSigningKey returns a service-account signing key pair: the private key
// for --service-account-signing-key-file and the public key for
// --service-account-key-file.
func NewSigningKey() (publicPEM, privatePEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	priv, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return encode("PUBLIC KEY", pub), priv, nil
}

func template(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:     now.Add(Validity),
	}, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return encode("EC PRIVATE KEY", der), nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

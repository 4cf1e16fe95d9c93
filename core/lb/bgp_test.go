package lb

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/config"
)

func TestDaemonNamespace(t *testing.T) {
	file := func(content string, err error) func(string) ([]byte, error) {
		return func(path string) ([]byte, error) {
			if path != namespaceFile {
				return nil, fmt.Errorf("read %s, want %s", path, namespaceFile)
			}
			return []byte(content), err
		}
	}
	tests := []struct {
		name string
		env  string
		read func(string) ([]byte, error)
		want string
	}{
		{"POD_NAMESPACE first", "lb-system", file("other\n", nil), "lb-system"},
		{"then the service account's file", "", file("other\n", nil), "other"},
		{"then the default", "", file("", errors.New("no such file")), "switchyard-system"},
		{"a blank file is no namespace", " ", file(" \n", nil), "switchyard-system"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DaemonNamespace(tt.env, tt.read); got != tt.want {
				t.Errorf("DaemonNamespace = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSecretPassword(t *testing.T) {
	ref := config.SecretKeyRef{Name: "bgp", Key: "password"}
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret
		want    string
		wantErr string
	}{
		{name: "trailing newline trimmed", secret: secret(map[string]string{"password": "s3cret\n"}), want: "s3cret"},
		{name: "missing Secret", secret: nil, wantErr: "password Secret ns/bgp not found"},
		{name: "missing key", secret: secret(map[string]string{"pw": "x"}), wantErr: `password Secret ns/bgp has no key "password"`},
		{name: "empty key", secret: secret(map[string]string{"password": " \n"}), wantErr: `password Secret ns/bgp: key "password" is empty`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := secretPassword("ns", ref, tt.secret)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tt.want || gotErr != tt.wantErr {
				t.Errorf("secretPassword = %q, %q; want %q, %q", got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

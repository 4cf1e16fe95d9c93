package controlplane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestEnvironWithout(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{name: "empty", env: nil, want: []string{}},
		{
			name: "strips only the prefix",
			env:  []string{"PATH=/bin", "ETCD_NAME=x", "ETCD_DATA_DIR=/y", "MY_ETCD_X=1", "HOME=/root"},
			want: []string{"PATH=/bin", "MY_ETCD_X=1", "HOME=/root"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, EnvironWithout(tc.env, "ETCD_")); diff != "" {
				t.Errorf("EnvironWithout (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		name string
		data string
		n    int
		want string
	}{
		{name: "fewer lines than n", data: "a\nb\n", n: 5, want: "a\nb"},
		{name: "exactly n", data: "a\nb", n: 2, want: "a\nb"},
		{name: "more lines than n", data: "a\nb\nc\nd\n", n: 2, want: "c\nd"},
		{name: "zero", data: "a\nb", n: 0, want: ""},
		{name: "empty", data: "", n: 3, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := lastLines([]byte(tc.data), tc.n); got != tc.want {
				t.Errorf("lastLines(%q, %d) = %q, want %q", tc.data, tc.n, got, tc.want)
			}
		})
	}
}

func TestFreePortsDistinct(t *testing.T) {
	got, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range got {
		if p <= 0 || seen[p] {
			t.Fatalf("freePorts(5) = %v, want 5 distinct ports", got)
		}
		seen[p] = true
	}
}

func TestKubeconfigRoundTrip(t *testing.T) {
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte("CA FROM FILE"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   *rest.Config
		want *rest.Config
	}{
		{
			name: "client certificate",
			in: &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
				CAData: []byte("CA"), CertData: []byte("CERT"), KeyData: []byte("KEY")}},
			want: &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
				CAData: []byte("CA"), CertData: []byte("CERT"), KeyData: []byte("KEY")}},
		},
		{
			name: "bearer token, CA read from its file",
			in: &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "tok",
				TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}},
			want: &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "tok",
				TLSClientConfig: rest.TLSClientConfig{CAData: []byte("CA FROM FILE")}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kubeconfig")
			if err := WriteKubeconfig(path, tc.in); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := clientcmd.RESTConfigFromKubeConfig(data)
			if err != nil {
				t.Fatalf("kubeconfig does not load: %v\n%s", err, data)
			}
			type view struct {
				Host, Token               string
				CAData, CertData, KeyData string
			}
			v := func(c *rest.Config) view {
				return view{c.Host, c.BearerToken, string(c.CAData), string(c.CertData), string(c.KeyData)}
			}
			if diff := cmp.Diff(v(tc.want), v(got)); diff != "" {
				t.Errorf("config after round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKubeconfigMissingCAFile(t *testing.T) {
	cfg := &rest.Config{Host: "https://x", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(t.TempDir(), "missing")}}
	if _, err := Kubeconfig(cfg); err == nil {
		t.Fatal("Kubeconfig with a missing CA file succeeded, want error")
	}
}

func TestStartMissingBinaries(t *testing.T) {
	_, err := Start(t.Context(), Options{BinDir: t.TempDir(), Dir: t.TempDir()})
	if err == nil {
		t.Fatal("Start without binaries succeeded, want error")
	}
}

// TestAPIServerArgsNameWrittenFiles checks that every file kube-apiserver
// is pointed at is one writePKI writes.
func TestAPIServerArgsNameWrittenFiles(t *testing.T) {
	dir := t.TempDir()
	c := &ControlPlane{layout: layout{dir: dir}}
	if err := os.MkdirAll(c.layout.path("pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.writePKI(); err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, arg := range apiServerArgs(c.layout, ports{etcdClient: 1, etcdPeer: 2, apiServer: 3}) {
		name, value, _ := strings.Cut(arg, "=")
		if !strings.HasSuffix(name, "-file") {
			continue
		}
		files++
		if _, err := os.Stat(value); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if files != 5 {
		t.Errorf("found %d file flags, want 5 (CA, serving cert and key, SA public and private key)", files)
	}
}

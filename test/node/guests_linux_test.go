package node

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/tools/clientcmd"
)

func TestGuestAt(t *testing.T) {
	dir := "/state"
	for _, tc := range []struct {
		i    int
		want Guest
	}{
		{0, Guest{Name: NodeName, IP: NodeIP, MAC: NodeMAC, Tap: TapName, PodCIDR: PodCIDR, dir: "/state"}},
		{1, Guest{Name: "node2", IP: "192.168.100.3", MAC: "52:54:00:53:59:03", Tap: "synode1", PodCIDR: "10.244.1.0/24", Index: 1, dir: "/state/node2"}},
		{2, Guest{Name: "node3", IP: "192.168.100.4", MAC: "52:54:00:53:59:04", Tap: "synode2", PodCIDR: "10.244.2.0/24", Index: 2, dir: "/state/node3"}},
	} {
		got := guestAt(dir, tc.i)
		if diff := cmp.Diff(tc.want, *got, cmp.AllowUnexported(Guest{})); diff != "" {
			t.Errorf("guestAt(%d) (-want +got):\n%s", tc.i, diff)
		}
	}
	guests := guestsAt(dir, 3)
	if diff := cmp.Diff([]string{"10.244.0.0/24=192.168.100.2", "10.244.2.0/24=192.168.100.4"}, guests[1].routes(guests)); diff != "" {
		t.Errorf("node2's routes (-want +got):\n%s", diff)
	}
	if got := guestsAt(dir, 1)[0].routes(guestsAt(dir, 1)); len(got) != 0 {
		t.Errorf("a lone guest's routes = %v, want none", got)
	}
	if a, b := guests[0].qemuName(), guests[1].qemuName(); a != "qemu" || b != "qemu-node2" {
		t.Errorf("qemu names %q, %q; want qemu, qemu-node2", a, b)
	}
}

func TestReadGuestCount(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       int
	}{
		{name: "no file: a state directory from before", want: 1},
		{name: "two", file: "2\n", want: 2},
		{name: "garbage", file: "x", want: 1},
		{name: "too many", file: "9", want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, guestCountFile), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := readGuestCount(dir); got != tc.want {
				t.Errorf("readGuestCount = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestWriteShare checks what each guest's init reads: its own names and
// addresses, the routes to the other guests' pods, its pod CIDR in the
// CNI configuration, and a kubelet identity of its own.
func TestWriteShare(t *testing.T) {
	dir, kubeBin := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(kubeBin, kubeletBin), []byte("kubelet"), 0o755); err != nil {
		t.Fatal(err)
	}
	guests := guestsAt(dir, 2)
	for _, g := range guests {
		if err := os.MkdirAll(g.share(), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writePKI(dir, guests); err != nil {
		t.Fatal(err)
	}
	for _, g := range guests {
		if err := writeShare(g, guests, kubeBin, nil); err != nil {
			t.Fatal(err)
		}
	}
	read := func(g *Guest, name string) string {
		b, err := os.ReadFile(filepath.Join(g.share(), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	env := map[string]string{}
	for line := range strings.Lines(read(guests[1], "node.env")) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		env[k] = strings.Trim(v, `"`)
	}
	want := map[string]string{"NODE_NAME": "node2", "NODE_IP": "192.168.100.3", "NODE_MAC": "52:54:00:53:59:03",
		"HOST_IP": HostIP, "ROUTES": "10.244.0.0/24=192.168.100.2"}
	if diff := cmp.Diff(want, env, cmpopts.IgnoreMapEntries(func(k, _ string) bool { _, ok := want[k]; return !ok })); diff != "" {
		t.Errorf("node2's node.env (-want +got):\n%s", diff)
	}
	var cni struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal([]byte(read(guests[1], "cni.conflist")), &cni); err != nil {
		t.Fatalf("node2's CNI configuration: %v", err)
	}
	var types, subnets []string
	for _, p := range cni.Plugins {
		types = append(types, p.Type)
		for _, r := range p.IPAM.Ranges {
			for _, sub := range r {
				subnets = append(subnets, sub.Subnet)
			}
		}
	}
	if diff := cmp.Diff([]string{"bridge", "portmap"}, types); diff != "" {
		t.Errorf("node2's CNI plugins (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"10.244.1.0/24"}, subnets); diff != "" {
		t.Errorf("node2's pod subnets (-want +got):\n%s", diff)
	}
	for _, g := range guests {
		cfg, err := clientcmd.Load([]byte(read(g, "kubelet.kubeconfig")))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(cfg.AuthInfos["user"].ClientCertificateData)
		if block == nil {
			t.Fatalf("%s's kubelet kubeconfig has no client certificate", g.Name)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if want := "system:node:" + g.Name; cert.Subject.CommonName != want {
			t.Errorf("%s's kubelet is %q, want %q", g.Name, cert.Subject.CommonName, want)
		}
	}
}

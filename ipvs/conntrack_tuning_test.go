package ipvs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// kubeProxyTuning is kube-proxy's default conntrack configuration.
var kubeProxyTuning = ConntrackTuning{MaxPerCore: 32768, Min: 131072, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}

func TestConntrackTuningSettings(t *testing.T) {
	tests := []struct {
		name   string
		tuning ConntrackTuning
		cpus   int
		want   []SysctlSetting
	}{
		{name: "zero leaves everything", tuning: ConntrackTuning{}, cpus: 8},
		{
			name: "kube-proxy's defaults, 8 CPUs", tuning: kubeProxyTuning, cpus: 8,
			want: []SysctlSetting{
				{Name: "net/netfilter/nf_conntrack_max", Value: "262144"},
				{Name: "net/netfilter/nf_conntrack_tcp_timeout_established", Value: "86400"},
				{Name: "net/netfilter/nf_conntrack_tcp_timeout_close_wait", Value: "3600"},
			},
		},
		{
			name: "min wins on a small node", tuning: kubeProxyTuning, cpus: 2,
			want: []SysctlSetting{
				{Name: "net/netfilter/nf_conntrack_max", Value: "131072"},
				{Name: "net/netfilter/nf_conntrack_tcp_timeout_established", Value: "86400"},
				{Name: "net/netfilter/nf_conntrack_tcp_timeout_close_wait", Value: "3600"},
			},
		},
		{
			name: "maxPerCore 0 leaves the max, min unused", tuning: ConntrackTuning{Min: 131072, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}, cpus: 8,
			want: []SysctlSetting{
				{Name: "net/netfilter/nf_conntrack_udp_timeout", Value: "30"},
				{Name: "net/netfilter/nf_conntrack_udp_timeout_stream", Value: "120"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.tuning.Settings(tt.cpus)); diff != "" {
				t.Errorf("Settings(%d) (-want +got):\n%s", tt.cpus, diff)
			}
		})
	}
}

func TestEnsureConntrackHashsize(t *testing.T) {
	tests := []struct {
		name, initial string
		max           int
		want          string
		wantChange    bool
		wantErr       bool
	}{
		{name: "raised to a quarter of the max", initial: "16384", max: 262144, want: "65536", wantChange: true},
		{name: "large enough already", initial: "65536", max: 262144, want: "65536"},
		{name: "larger is kept", initial: "1048576", max: 262144, want: "1048576"},
		{name: "garbage", initial: "lots", max: 262144, want: "lots", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "hashsize")
			if err := os.WriteFile(path, []byte(tt.initial+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			change, err := EnsureConntrackHashsize(ProcSysctls{Root: dir}, tt.max)
			if (err != nil) != tt.wantErr {
				t.Fatalf("EnsureConntrackHashsize = %v, want error: %t", err, tt.wantErr)
			}
			if (change != nil) != tt.wantChange {
				t.Errorf("change = %+v, want one: %t", change, tt.wantChange)
			}
			b, _ := os.ReadFile(path)
			if got := string(b); got != tt.want && got != tt.want+"\n" {
				t.Errorf("hashsize = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := EnsureConntrackHashsize(ProcSysctls{Root: t.TempDir()}, 262144); err == nil {
		t.Error("EnsureConntrackHashsize without nf_conntrack loaded succeeded")
	}
}

func TestOnlineCPUs(t *testing.T) {
	tests := []struct {
		online  string
		want    int
		wantErr bool
	}{
		{online: "0\n", want: 1},
		{online: "0-3\n", want: 4},
		{online: "0-3,8,10-11\n", want: 7},
		{online: "3-1\n", wantErr: true},
		{online: "\n", wantErr: true},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "devices/system/cpu"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "devices/system/cpu/online"), []byte(tt.online), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := OnlineCPUs(dir)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("OnlineCPUs(%q) = %d, %v; want %d, error: %t", tt.online, got, err, tt.want, tt.wantErr)
		}
	}
}

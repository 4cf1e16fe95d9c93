package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// kernelDefaults are a fresh node's values of the parameters the IPVS
// dataplane sets, with ip_vs loaded.
func kernelDefaults() map[string]string {
	return map[string]string{
		"net/ipv4/ip_forward":                   "0",
		"net/ipv6/conf/all/forwarding":          "0",
		"net/ipv4/vs/conntrack":                 "0",
		"net/ipv4/vs/expire_nodest_conn":        "0",
		"net/ipv4/vs/expire_quiescent_template": "0",
		"net/ipv4/vs/conn_reuse_mode":           "1",
		"net/ipv4/conf/all/arp_ignore":          "0",
		"net/ipv4/conf/all/arp_announce":        "0",
	}
}

// readOnlySysctls is /proc/sys as an unprivileged container sees it.
type readOnlySysctls struct{ ipvs.Sysctls }

func (readOnlySysctls) Set(name, value string) error {
	return errors.New("read-only file system")
}

func TestSetSysctls(t *testing.T) {
	tests := []struct {
		name     string
		config   string
		kernel   func(map[string]string)
		loadErr  error
		want     func(map[string]string)
		wantLoad bool
		wantErr  string
	}{
		{
			name:     "ipvs by default, strictARP by default",
			wantLoad: true,
			want: func(m map[string]string) {
				for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/vs/conntrack",
					"net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template", "net/ipv4/conf/all/arp_ignore"} {
					m[k] = "1"
				}
				m["net/ipv4/conf/all/arp_announce"] = "2"
			},
		},
		{
			name:     "strictARP off leaves ARP alone",
			config:   "dataplane: {ipvs: {strictARP: false}}\n",
			wantLoad: true,
			want: func(m map[string]string) {
				for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/vs/conntrack",
					"net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template"} {
					m[k] = "1"
				}
			},
		},
		{
			name:     "no IPv6",
			config:   "dataplane: {ipvs: {strictARP: false}}\n",
			kernel:   func(m map[string]string) { delete(m, "net/ipv6/conf/all/forwarding") },
			wantLoad: true,
			want: func(m map[string]string) {
				delete(m, "net/ipv6/conf/all/forwarding")
				for _, k := range []string{"net/ipv4/ip_forward", "net/ipv4/vs/conntrack",
					"net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template"} {
					m[k] = "1"
				}
			},
		},
		{
			name:     "ip_vs cannot be loaded",
			loadErr:  errors.New("no such file or directory"),
			wantLoad: true,
			wantErr:  "set sysctls: load ip_vs: no such file or directory",
		},
		{
			name: "ip_vs parameters missing",
			kernel: func(m map[string]string) {
				delete(m, "net/ipv4/vs/conntrack")
			},
			wantLoad: true,
			want: func(m map[string]string) {
				delete(m, "net/ipv4/vs/conntrack")
				for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
					"net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template", "net/ipv4/conf/all/arp_ignore"} {
					m[k] = "1"
				}
				m["net/ipv4/conf/all/arp_announce"] = "2"
			},
			wantErr: "net/ipv4/vs/conntrack",
		},
		{
			name:   "dryrun touches nothing",
			config: "dataplane: {mode: dryrun}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte("apiVersion: switchyard.dev/v1alpha1\nkind: SwitchyardConfig\n" + tt.config))
			if err != nil {
				t.Fatal(err)
			}
			initial := kernelDefaults()
			if tt.kernel != nil {
				tt.kernel(initial)
			}
			want := kernelDefaults()
			if tt.kernel != nil {
				tt.kernel(want)
			}
			if tt.want != nil {
				tt.want(want)
			}
			sysctls := ipvstest.NewFakeSysctls(initial)
			loaded := false
			host := sysctlHost{LoadIPVS: func() error { loaded = true; return tt.loadErr }, Sysctls: sysctls}

			err = setSysctls(cfg, host, slog.New(slog.DiscardHandler))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("setSysctls = %v, want an error containing %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("setSysctls = %v", err)
			}
			if loaded != tt.wantLoad {
				t.Errorf("loaded ip_vs = %v, want %v", loaded, tt.wantLoad)
			}
			if diff := cmp.Diff(want, sysctls.Values()); diff != "" {
				t.Errorf("sysctls (-want +got):\n%s", diff)
			}
			if tt.wantErr != "" {
				return
			}

			// What the daemon's unprivileged container then does: with
			// every value preset it writes nothing, so a read-only
			// /proc/sys is no error.
			strictARP := cfg.Dataplane.IPVS.StrictARP == nil || *cfg.Dataplane.IPVS.StrictARP
			if cfg.Dataplane.Mode == config.ModeIPVS {
				if _, changed, err := ipvs.SetSysctls(readOnlySysctls{sysctls}, ipvs.SysctlSettings(strictARP)); err != nil || len(changed) > 0 {
					t.Errorf("the daemon after setSysctls: changed %v, err %v; want nothing to write", changed, err)
				}
			}
		})
	}
}

// TestReadOnlySysctlsFailWithoutInit shows why the init container exists:
// on a fresh node, the daemon cannot set its parameters through a
// read-only /proc/sys.
func TestReadOnlySysctlsFailWithoutInit(t *testing.T) {
	ro := readOnlySysctls{ipvstest.NewFakeSysctls(kernelDefaults())}
	if _, _, err := ipvs.SetSysctls(ro, ipvs.SysctlSettings(true)); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Errorf("SetSysctls through a read-only /proc/sys = %v, want the write's error", err)
	}
}

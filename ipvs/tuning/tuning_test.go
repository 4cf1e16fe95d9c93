package tuning_test

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/ipvs/tuning"
)

// kernelDefaults are a fresh node's values of the parameters the IPVS
// dataplane sets, with ip_vs loaded.
func kernelDefaults() map[string]string {
	return map[string]string{
		"net/ipv4/ip_forward":                                "0",
		"net/ipv6/conf/all/forwarding":                       "0",
		"net/ipv4/vs/conntrack":                              "0",
		"net/ipv4/vs/expire_nodest_conn":                     "0",
		"net/ipv4/vs/expire_quiescent_template":              "0",
		"net/ipv4/vs/conn_reuse_mode":                        "1",
		"net/ipv4/conf/all/arp_ignore":                       "0",
		"net/ipv4/conf/all/arp_announce":                     "0",
		"net/netfilter/nf_conntrack_max":                     "65536",
		"net/netfilter/nf_conntrack_tcp_timeout_established": "432000",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "60",
		"net/netfilter/nf_conntrack_udp_timeout":             "30",
		"net/netfilter/nf_conntrack_udp_timeout_stream":      "120",
	}
}

// testCPUs is the CPU count the tests' nodes report.
const testCPUs = 8

// kubeProxyTuned is what the default conntrack section sets on a node
// with testCPUs CPUs, as kube-proxy's defaults do: 32768 per CPU (at
// least 131072), established TCP 24h, CLOSE_WAIT 1h; the UDP timeouts
// left alone.
func kubeProxyTuned(m map[string]string) {
	m["net/netfilter/nf_conntrack_max"] = "262144"
	m["net/netfilter/nf_conntrack_tcp_timeout_established"] = "86400"
	m["net/netfilter/nf_conntrack_tcp_timeout_close_wait"] = "3600"
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
			wantErr:  "load ip_vs: no such file or directory",
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
			cfg := parseConfig(t, tt.config)
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
			wantHashsize := "16384"
			if cfg.Dataplane.Mode == config.ModeIPVS && tt.loadErr == nil {
				kubeProxyTuned(want)
				wantHashsize = "65536" // a quarter of nf_conntrack_max
			}
			sysctls := ipvstest.NewFakeSysctls(initial)
			params := ipvstest.NewFakeSysctls(map[string]string{"hashsize": "16384"})
			loaded := false
			host := tuning.Host{
				LoadIPVS: func() error { loaded = true; return tt.loadErr }, Sysctls: sysctls,
				ConntrackParams: params, CPUs: func() int { return testCPUs },
			}

			res := apply(t, cfg, host, tt.wantErr)
			if skipped := cfg.Dataplane.Mode != config.ModeIPVS; res.Skipped != skipped {
				t.Errorf("Result.Skipped = %v, want %v", res.Skipped, skipped)
			}
			if loaded != tt.wantLoad {
				t.Errorf("loaded ip_vs = %v, want %v", loaded, tt.wantLoad)
			}
			if diff := cmp.Diff(want, sysctls.Values()); diff != "" {
				t.Errorf("sysctls (-want +got):\n%s", diff)
			}
			if got := params.Values()["hashsize"]; got != wantHashsize {
				t.Errorf("nf_conntrack hashsize = %s, want %s", got, wantHashsize)
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
					t.Errorf("the daemon after Apply: changed %v, err %v; want nothing to write", changed, err)
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

// readOnlyParams is /sys as an unprivileged container sees it.
type readOnlyParams struct{ ipvs.Sysctls }

// namespacedSysctls is /proc/sys outside the host's network namespace:
// nf_conntrack_max is there, read-only (mode 0444, even for root).
type namespacedSysctls struct{ ipvs.Sysctls }

func (n namespacedSysctls) Set(name, value string) error {
	if name == ipvs.ConntrackMaxSysctl {
		return &fs.PathError{Op: "open", Path: "/proc/sys/" + name, Err: syscall.EACCES}
	}
	return n.Sysctls.Set(name, value)
}

func (readOnlyParams) Set(name, value string) error {
	return &fs.PathError{Op: "open", Path: "/sys/module/nf_conntrack/parameters/" + name, Err: syscall.EROFS}
}

func TestSetSysctlsConntrack(t *testing.T) {
	tests := []struct {
		name         string
		config       string
		cpus         int
		params       func(ipvs.Sysctls) ipvs.Sysctls
		sysctls      func(ipvs.Sysctls) ipvs.Sysctls
		want         func(map[string]string)
		wantHashsize string
		wantReadOnly bool // the hashsize not raised, a warning
		wantErr      string
	}{
		{
			name: "min on a small node", cpus: 2,
			want: func(m map[string]string) {
				kubeProxyTuned(m)
				m["net/netfilter/nf_conntrack_max"] = "131072"
			},
			wantHashsize: "32768",
		},
		{
			name:   "maxPerCore 0 leaves the max and the hashsize",
			config: "conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 2h, udpTimeout: 45s, udpStreamTimeout: 3m}\n",
			cpus:   8,
			want: func(m map[string]string) {
				m["net/netfilter/nf_conntrack_tcp_timeout_close_wait"] = "7200"
				m["net/netfilter/nf_conntrack_udp_timeout"] = "45"
				m["net/netfilter/nf_conntrack_udp_timeout_stream"] = "180"
			},
			wantHashsize: "16384",
		},
		{
			name: "a large enough hashsize is kept", config: "conntrack: {maxPerCore: 1000, min: 0}\n", cpus: 8,
			want: func(m map[string]string) {
				kubeProxyTuned(m)
				m["net/netfilter/nf_conntrack_max"] = "8000"
			},
			wantHashsize: "16384",
		},
		{
			name: "read-only /sys only warns", cpus: 8,
			params:       func(p ipvs.Sysctls) ipvs.Sysctls { return readOnlyParams{p} },
			want:         kubeProxyTuned,
			wantHashsize: "16384",
			wantReadOnly: true,
		},
		{
			name: "nf_conntrack_max read-only in a node's own network namespace names the fix", cpus: 8,
			sysctls: func(s ipvs.Sysctls) ipvs.Sysctls { return namespacedSysctls{s} },
			want: func(m map[string]string) {
				kubeProxyTuned(m)
				m["net/netfilter/nf_conntrack_max"] = kernelDefaults()["net/netfilter/nf_conntrack_max"]
			},
			wantHashsize: "16384",
			wantErr:      "set conntrack.maxPerCore: 0",
		},
		{
			name: "nf_conntrack's parameters missing", cpus: 8,
			params:       func(ipvs.Sysctls) ipvs.Sysctls { return ipvstest.NewFakeSysctls(nil) },
			want:         kubeProxyTuned,
			wantHashsize: "16384",
			wantErr:      "conntrack hashsize",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parseConfig(t, tt.config)
			sysctls := ipvstest.NewFakeSysctls(kernelDefaults())
			params := ipvstest.NewFakeSysctls(map[string]string{"hashsize": "16384"})
			var p ipvs.Sysctls = params
			if tt.params != nil {
				p = tt.params(params)
			}
			var sc ipvs.Sysctls = sysctls
			if tt.sysctls != nil {
				sc = tt.sysctls(sysctls)
			}
			host := tuning.Host{LoadIPVS: func() error { return nil }, Sysctls: sc, ConntrackParams: p, CPUs: func() int { return tt.cpus }}
			res := apply(t, cfg, host, tt.wantErr)
			if got := res.HashsizeReadOnly != nil; got != tt.wantReadOnly {
				t.Errorf("Result.HashsizeReadOnly = %v, want set %v", res.HashsizeReadOnly, tt.wantReadOnly)
			}
			if raised := tt.wantHashsize != "16384"; (res.Hashsize != nil) != raised || (raised && res.Hashsize.Value != tt.wantHashsize) {
				t.Errorf("Result.Hashsize = %+v, want a change to %s: %v", res.Hashsize, tt.wantHashsize, raised)
			}
			want := kernelDefaults()
			for _, k := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding", "net/ipv4/vs/conntrack",
				"net/ipv4/vs/expire_nodest_conn", "net/ipv4/vs/expire_quiescent_template", "net/ipv4/conf/all/arp_ignore"} {
				want[k] = "1"
			}
			want["net/ipv4/conf/all/arp_announce"] = "2"
			tt.want(want)
			if diff := cmp.Diff(want, sysctls.Values()); diff != "" {
				t.Errorf("sysctls (-want +got):\n%s", diff)
			}
			if got := params.Values()["hashsize"]; got != tt.wantHashsize {
				t.Errorf("nf_conntrack hashsize = %s, want %s", got, tt.wantHashsize)
			}
		})
	}
}

// apply runs tuning.Apply and checks its error: one containing wantErr,
// or none when wantErr is "". The result counts either way.
func apply(t *testing.T, cfg *config.Config, host tuning.Host, wantErr string) tuning.Result {
	t.Helper()
	res, err := tuning.Apply(cfg, host)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Apply = %v, want an error containing %q", err, wantErr)
		}
	} else if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	return res
}

// parseConfig parses a config file made of the header and body.
func parseConfig(t *testing.T, body string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte("apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\n" + body))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

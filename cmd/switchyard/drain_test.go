package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/k8s/k8stest"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/core/runner/runnertest"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

// TestDrainTimeoutDefaultsAgree checks that the config's documented
// default for dataplane.ipvs.drainTimeout is the dataplane's own.
func TestDrainTimeoutDefaultsAgree(t *testing.T) {
	if config.DefaultDrainTimeout != ipvs.DefaultDrainTimeout {
		t.Errorf("config.DefaultDrainTimeout = %s, ipvs.DefaultDrainTimeout = %s", config.DefaultDrainTimeout, ipvs.DefaultDrainTimeout)
	}
}

// fakeIPVS opens what openIPVS opens, over the ipvs fakes (set changes
// them), and sends the dataplane on dps.
func fakeIPVS(dps chan<- *ipvs.Dataplane, set func(*ipvs.Config)) func(*config.Config, *slog.Logger) (plugin.Dataplane, error) {
	return func(cfg *config.Config, log *slog.Logger) (plugin.Dataplane, error) {
		c := ipvsConfig(cfg)
		c.Log = log
		c.Kernel, c.Addresses, c.Conntrack = ipvstest.NewFake(), ipvstest.NewFakeAddresses(), &ipvstest.FakeConntrack{}
		c.Sysctls = ipvstest.NewFakeSysctls(map[string]string{
			"net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1",
			"net/ipv4/vs/expire_nodest_conn": "1", "net/ipv4/vs/expire_quiescent_template": "1",
			"net/ipv4/vs/conn_reuse_mode": "0", "net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2",
		})
		set(&c)
		dp, err := ipvs.New(c)
		if err == nil {
			dps <- dp
		}
		return dp, err
	}
}

// TestDaemonReloadsDrainTimeout runs the daemon on the IPVS dataplane
// over the ipvs fakes: the real server of a removed endpoint that still
// has connections drains for the configured drainTimeout, and a reload
// that shortens it lets the next Drain delete the real server.
func TestDaemonReloadsDrainTimeout(t *testing.T) {
	kernel := ipvstest.NewFake()
	clock := runnertest.NewClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	dps := make(chan *ipvs.Dataplane, 1)
	const yaml = "dataplane:\n  mode: ipvs\n  ipvs:\n    drainTimeout: 20m\n"
	d := startDaemonWith(t, yaml, fakeIPVS(dps, func(c *ipvs.Config) {
		c.Kernel, c.Now = kernel, clock.Now
	}))
	dp := <-dps
	vs := model.VirtualServiceKey{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: model.TCP}
	gone := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.1.0.1"), Port: 8080}
	waitDests := func(want string) {
		t.Helper()
		poll(t, 2*time.Minute, func() error {
			ds, err := kernel.Destinations(vs)
			if err != nil {
				return err
			}
			var got []string
			for _, s := range ds {
				got = append(got, fmt.Sprintf("%s:%d/%d", s.Addr, s.Port, s.Weight))
			}
			if g := strings.Join(got, " "); g != want {
				return fmt.Errorf("real servers of %v = %q, want %q", vs, g, want)
			}
			return nil
		})
	}
	waitDests("10.1.0.1:8080/1 10.1.0.2:8080/1")
	if err := kernel.SetConns(vs, gone, 1, 0); err != nil {
		t.Fatal(err)
	}

	// The endpoint goes: its real server drains at weight 0.
	if _, err := d.client.DiscoveryV1().EndpointSlices("default").Update(t.Context(), k8stest.Slice("default", "web-abc", "web", true, "10.1.0.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDests("10.1.0.1:8080/0 10.1.0.2:8080/1")
	clock.Step(16 * time.Minute)
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	waitDests("10.1.0.1:8080/0 10.1.0.2:8080/1") // 16m < 20m: still draining (past the default 15m)

	// A reload to 2m applies at once: the next Drain deletes it.
	d.tc.Write(t, strings.Replace(yaml, "20m", "2m", 1))
	poll(t, 2*time.Minute, func() error {
		if !strings.Contains(d.Logs.String(), `"applied":"dataplane.ipvs.drainTimeout"`) {
			return fmt.Errorf("drainTimeout reload not logged")
		}
		return nil
	})
	if err := dp.Drain(); err != nil {
		t.Fatal(err)
	}
	waitDests("10.1.0.2:8080/1")
}

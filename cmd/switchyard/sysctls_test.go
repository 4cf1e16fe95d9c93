package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/ipvs/tuning"
)

// TestSetSysctlsReports checks the --set-sysctls wiring: what
// ipvs/tuning did is logged, and its error carries the mode's name.
func TestSetSysctlsReports(t *testing.T) {
	parse := func(extra string) *config.Config {
		t.Helper()
		c, err := config.Parse([]byte("apiVersion: switchyard.dev/v1alpha2\nkind: SwitchyardConfig\n" + extra))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	fresh := map[string]string{"net/ipv4/ip_forward": "0", "net/ipv4/vs/conntrack": "0",
		"net/ipv4/vs/expire_nodest_conn": "0", "net/ipv4/vs/expire_quiescent_template": "0",
		"net/netfilter/nf_conntrack_max": "65536"}
	host := tuning.Host{
		LoadIPVS: func() error { return nil }, Sysctls: ipvstest.NewFakeSysctls(fresh),
		ConntrackParams: ipvstest.NewFakeSysctls(map[string]string{"hashsize": "16384"}), CPUs: func() int { return 8 },
	}
	if err := setSysctls(parse("dataplane: {ipvs: {strictARP: false}}\nconntrack: {tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}\n"), host, log); err != nil {
		t.Fatalf("setSysctls: %v", err)
	}
	for _, want := range []string{
		`msg="set sysctl" name=net/ipv4/ip_forward value=1 was=0`,
		`msg="set sysctl" name=net/netfilter/nf_conntrack_max value=262144 was=65536`,
		`msg="set conntrack hashsize" value=65536 was=16384`,
		`msg="sysctls set" count=5 changed=5 cpus=8`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}

	if err := setSysctls(parse("dataplane: {mode: dryrun}\n"), tuning.Host{}, log); err != nil || !strings.Contains(logs.String(), `msg="no sysctls to set" mode=dryrun`) {
		t.Errorf("dry run: setSysctls = %v; logs:\n%s", err, logs.String())
	}
	host.LoadIPVS = func() error { return errors.New("no such file or directory") }
	if err := setSysctls(parse(""), host, log); err == nil || err.Error() != "set sysctls: load ip_vs: no such file or directory" {
		t.Errorf("setSysctls without ip_vs = %v", err)
	}
}

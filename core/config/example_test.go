package config_test

import (
	"errors"
	"fmt"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Parse applies the defaults to what the file leaves out.
func ExampleParse() {
	c, err := config.Parse([]byte(`apiVersion: switchyard.dev/v1alpha2
kind: SwitchyardConfig
dataplane:
  minSyncPeriod: 100ms
  ipvs:
    scheduler: wlc
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Dataplane.Mode, c.Dataplane.IPVS.Scheduler, c.Dataplane.SyncPeriod, c.Dataplane.MinSyncPeriod, c.Metrics.BindAddress)
	// Output: ipvs wlc 30s 100ms 127.0.0.1:10249
}

// A v1alpha1 file, with the shared dataplane settings under
// dataplane.ipvs, is still read, and converted to v1alpha2.
func ExampleParse_v1alpha1() {
	c, err := config.Parse([]byte(`apiVersion: switchyard.dev/v1alpha1
kind: SwitchyardConfig
dataplane:
  ipvs:
    scheduler: wlc
    syncPeriod: 1m
    clusterCIDRs: [10.244.0.0/16]
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(c.APIVersion, c.Dataplane.IPVS.Scheduler, c.Dataplane.SyncPeriod, c.Dataplane.ClusterCIDRs)
	// Output: switchyard.dev/v1alpha2 wlc 1m0s [10.244.0.0/16]
}

// Every bad value is reported at once, with its line and field path; the
// scheduler is checked against the dataplane's (as the daemon does).
func ExampleParse_errors() {
	_, err := config.Parse([]byte(`apiVersion: switchyard.dev/v1alpha2
kind: SwitchyardConfig
dataplane:
  syncPeriod: 30
  clusterCIDRs: [10.244.0.1/16]
  ipvs:
    scheduler: fastest
health:
  bindAddress: localhost
`), config.SchedulerCheck(ipvs.SchedulerSet))
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Println(e)
		}
	}
	// Output:
	// line 4: dataplane.syncPeriod: invalid duration "30" (want a Go duration such as "30s" or "1m30s")
	// line 5: dataplane.clusterCIDRs[0]: invalid CIDR "10.244.0.1/16": host bits set (want 10.244.0.0/16)
	// line 7: dataplane.ipvs.scheduler: unknown scheduler "fastest" (want rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos)
	// line 9: health.bindAddress: invalid address "localhost" (want host:port, such as "0.0.0.0:10256")
}

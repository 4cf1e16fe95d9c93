package config_test

import (
	"errors"
	"fmt"

	"github.com/switchyard-lb/switchyard/core/config"
)

// Parse applies the defaults to what the file leaves out.
func ExampleParse() {
	c, err := config.Parse([]byte(`apiVersion: switchyard.dev/v1alpha1
kind: SwitchyardConfig
dataplane:
  ipvs:
    scheduler: wlc
`))
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Dataplane.Mode, c.Dataplane.IPVS.Scheduler, c.Dataplane.IPVS.SyncPeriod, c.Metrics.BindAddress)
	// Output: ipvs wlc 30s 127.0.0.1:10249
}

// Every bad value is reported at once, with its line and field path.
func ExampleParse_errors() {
	_, err := config.Parse([]byte(`apiVersion: switchyard.dev/v1alpha1
kind: SwitchyardConfig
dataplane:
  ipvs:
    scheduler: fastest
    syncPeriod: 30
    clusterCIDRs: [10.244.0.1/16]
health:
  bindAddress: localhost
`))
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Println(e)
		}
	}
	// Output:
	// line 5: dataplane.ipvs.scheduler: unknown scheduler "fastest" (want rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, fo, ovf, mh, twos)
	// line 6: dataplane.ipvs.syncPeriod: invalid duration "30" (want a Go duration such as "30s" or "1m30s")
	// line 7: dataplane.ipvs.clusterCIDRs[0]: invalid CIDR "10.244.0.1/16": host bits set (want 10.244.0.0/16)
	// line 9: health.bindAddress: invalid address "localhost" (want host:port, such as "0.0.0.0:10256")
}

package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// report is shaped as e2e.test v1.36's junit_01.xml (ginkgo v2): a spec
// the focus filtered out is "skipped" with no reason.
const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="0" errors="0" failures="1" time="120.5">
  <testsuite name="Kubernetes e2e suite" package="/" tests="5" disabled="0" skipped="3" errors="0" failures="1" time="120.5">
    <properties><property name="SuiteSucceeded" value="false"></property></properties>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="passed" time="34.2"></testcase>
    <testcase name="[It] [sig-network] Services should be able to create a functioning NodePort service [Conformance]" classname="Kubernetes e2e suite" status="failed" time="95.7">
      <failure message="" type="failed">[FAILED] service is not reachable within 2m0s timeout on endpoint 192.168.100.2:31234 over TCP protocol&#xA;In [It] at: service.go:1234</failure>
    </testcase>
    <testcase name="[It] [sig-network] Services should work after the service has been recreated" classname="Kubernetes e2e suite" status="skipped" time="0.4">
      <skipped message="skipped - Requires at least 2 nodes (not 1)"></skipped>
    </testcase>
    <testcase name="[It] [sig-storage] Volumes should store data" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="12.1"></testcase>
    <testcase name="[It] [sig-network] Services should be able to up and down services" classname="Kubernetes e2e suite" status="timedout" time="600">
      <error message="A suite timeout occurred" type="timedout"></error>
    </testcase>
    <testcase name="[It] [sig-network] Services should implement service.kubernetes.io/service-proxy-name" classname="Kubernetes e2e suite" status="interrupted" time="220.4">
      <failure message="interrupted" type="interrupted">[INTERRUPTED] Interrupted by User</failure>
    </testcase>
  </testsuite>
</testsuites>
`

func TestParseJUnit(t *testing.T) {
	got, err := ParseJUnit(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{Spec: "[sig-network] Services should serve a basic endpoint from pods [Conformance]", Outcome: Pass, Duration: 34 * time.Second},
		{Spec: "[sig-network] Services should be able to create a functioning NodePort service [Conformance]", Outcome: Fail,
			Reason: "[FAILED] service is not reachable within 2m0s timeout on endpoint 192.168.100.2:31234 over TCP protocol", Duration: 96 * time.Second},
		{Spec: "[sig-network] Services should work after the service has been recreated", Outcome: Skip, Reason: "Requires at least 2 nodes (not 1)"},
		{Spec: "[sig-storage] Volumes should store data", Outcome: Skip},
		{Spec: "[SynchronizedBeforeSuite]", Setup: true, Outcome: Pass, Duration: 12 * time.Second},
		{Spec: "[sig-network] Services should be able to up and down services", Outcome: Fail, Reason: "timedout: A suite timeout occurred", Duration: 600 * time.Second},
		{Spec: "[sig-network] Services should implement service.kubernetes.io/service-proxy-name", Outcome: Interrupted, Duration: 220 * time.Second},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseJUnit (-want +got):\n%s", diff)
	}
}

func TestParseJUnitRefusesGarbage(t *testing.T) {
	if _, err := ParseJUnit(strings.NewReader("not xml <")); err == nil {
		t.Error("ParseJUnit of garbage: no error")
	}
}

func TestFirstLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"\n\n  one  \ntwo", "one"},
		{strings.Repeat("x", 200), strings.Repeat("x", 157) + "..."},
	} {
		if got := firstLine(tc.in); got != tc.want {
			t.Errorf("firstLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

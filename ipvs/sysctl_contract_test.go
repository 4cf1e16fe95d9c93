package ipvs_test

import (
	"errors"
	"os"
	"testing"

	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// The parameters the dataplane sets, as a fresh guest kernel has them.
var kernelDefaults = map[string]string{
	"net/ipv4/ip_forward":                   "0",
	"net/ipv4/vs/conntrack":                 "0",
	"net/ipv4/vs/expire_nodest_conn":        "0",
	"net/ipv4/vs/expire_quiescent_template": "0",
	"net/ipv4/conf/all/arp_ignore":          "0",
	"net/ipv4/conf/all/arp_announce":        "0",
}

func TestSysctlsContractFake(t *testing.T) {
	testSysctlsContract(t, ipvstest.NewFakeSysctls(kernelDefaults))
}

func TestSysctlsContractProc(t *testing.T) {
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: writes the kernel lab's sysctls (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	testSysctlsContract(t, ipvs.ProcSysctls{})
}

func testSysctlsContract(t *testing.T, s ipvs.Sysctls) {
	// Leave the kernel as found, so the test can run again in the same VM.
	t.Cleanup(func() {
		for name, v := range kernelDefaults {
			if err := s.Set(name, v); err != nil {
				t.Errorf("restore %s: %v", name, err)
			}
		}
	})
	for name, want := range kernelDefaults {
		if got, err := s.Get(name); err != nil || got != want {
			t.Errorf("Get(%s) = %q, %v; want %q (fresh kernel)", name, got, err, want)
		}
	}
	for name := range kernelDefaults {
		if err := s.Set(name, "1"); err != nil {
			t.Fatalf("Set(%s): %v", name, err)
		}
		if got, err := s.Get(name); err != nil || got != "1" {
			t.Errorf("Get(%s) after Set 1 = %q, %v", name, got, err)
		}
	}
	if _, err := s.Get("net/ipv4/vs/no_such_parameter"); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("Get of a missing parameter: error %v, want %v", err, ipvs.ErrNotFound)
	}
	if err := s.Set("net/ipv4/vs/no_such_parameter", "1"); !errors.Is(err, ipvs.ErrNotFound) {
		t.Errorf("Set of a missing parameter: error %v, want %v", err, ipvs.ErrNotFound)
	}
}

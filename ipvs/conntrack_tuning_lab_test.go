package ipvs_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/test/lab"
)

// TestConntrackTuningKernel applies kube-proxy's default conntrack tuning
// to the guest kernel, as --set-sysctls does: every parameter exists under
// its name, takes its value, and nf_conntrack's hashsize grows to a
// quarter of nf_conntrack_max. It leaves the kernel as it found it.
func TestConntrackTuningKernel(t *testing.T) {
	if os.Getenv(lab.GuestEnv) != "1" {
		t.Skipf("guest-only: writes the kernel lab's conntrack parameters (%s=1); run `make test-lab`", lab.GuestEnv)
	}
	cpus, err := ipvs.OnlineCPUs("/sys")
	if err != nil || cpus < 1 {
		t.Fatalf("OnlineCPUs = %d, %v", cpus, err)
	}
	// The kernel lab's nodes are small: a min above the kernel's default
	// max makes the max (and so the hashsize) change.
	tuning := ipvs.ConntrackTuning{
		MaxPerCore: 32768, Min: 524288,
		TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour,
		UDPTimeout: 45 * time.Second, UDPStreamTimeout: 3 * time.Minute,
	}
	settings := tuning.Settings(cpus)
	sys, params := ipvs.ProcSysctls{}, ipvs.ProcSysctls{Root: ipvs.ConntrackParams}
	orig := map[string]string{}
	for _, st := range settings {
		v, err := sys.Get(st.Name)
		if err != nil {
			t.Fatalf("kernel parameter %s: %v", st.Name, err)
		}
		orig[st.Name] = v
	}
	origHash, err := params.Get("hashsize")
	if err != nil {
		t.Fatalf("nf_conntrack hashsize: %v", err)
	}
	t.Cleanup(func() {
		for name, v := range orig {
			if err := sys.Set(name, v); err != nil {
				t.Errorf("restore %s: %v", name, err)
			}
		}
		if err := params.Set("hashsize", origHash); err != nil {
			t.Errorf("restore hashsize: %v", err)
		}
	})
	t.Logf("kernel defaults: %v, hashsize %s, %d CPUs", orig, origHash, cpus)

	got, changed, err := ipvs.SetSysctls(sys, settings)
	if err != nil {
		t.Fatalf("SetSysctls: %v", err)
	}
	if len(changed) != len(settings) {
		t.Errorf("changed %d parameters, want every one of %d (none had kube-proxy's value)", len(changed), len(settings))
	}
	for _, st := range settings {
		if v, err := sys.Get(st.Name); err != nil || v != st.Value || got[st.Name] != st.Value {
			t.Errorf("%s = %q, %v (reported %q); want %s", st.Name, v, err, got[st.Name], st.Value)
		}
	}
	limit := tuning.Max(cpus)
	if _, err := ipvs.EnsureConntrackHashsize(params, limit); err != nil {
		t.Fatalf("EnsureConntrackHashsize: %v", err)
	}
	h, err := params.Get("hashsize")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(h); n < limit/4 {
		t.Errorf("hashsize = %s, want at least %d (nf_conntrack_max %d / 4)", h, limit/4, limit)
	}
}

package ipvs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/ipvstest"
)

func TestDataplaneSetsTimeouts(t *testing.T) {
	newDP := func(r *rig, tm ipvs.Timeouts) *ipvs.Dataplane {
		t.Helper()
		dp := r.plainDataplane(t, func(c *ipvs.Config) { c.Timeouts = tm })
		return dp
	}
	apply := func(dp *ipvs.Dataplane) error {
		return dp.Apply(t.Context(), plugin.Update{Plan: &model.Plan{}, Full: true})
	}
	s := time.Second

	t.Run("zero leaves the kernel's", func(t *testing.T) {
		r := newRig()
		if err := apply(newDP(r, ipvs.Timeouts{})); err != nil {
			t.Fatal(err)
		}
		if n := r.kernel.Calls(ipvstest.OpSetTimeouts); n != 0 {
			t.Errorf("SetTimeouts called %d times, want 0", n)
		}
	})

	t.Run("set once, and not again after a restart", func(t *testing.T) {
		r := newRig()
		tm := ipvs.Timeouts{TCP: 2 * time.Hour, UDP: 60 * s}
		dp := newDP(r, tm)
		for range 2 {
			if err := apply(dp); err != nil {
				t.Fatal(err)
			}
		}
		want := ipvs.Timeouts{TCP: 2 * time.Hour, TCPFin: ipvstest.DefaultTimeouts.TCPFin, UDP: 60 * s}
		got, _ := r.kernel.Timeouts()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("kernel timeouts (-want +got):\n%s", diff)
		}
		if err := apply(newDP(r, tm)); err != nil {
			t.Fatal(err)
		}
		if n := r.kernel.Calls(ipvstest.OpSetTimeouts); n != 1 {
			t.Errorf("SetTimeouts called %d times over two Applies and a restart, want 1", n)
		}
	})

	t.Run("a failure is retried by the next Apply", func(t *testing.T) {
		r := newRig()
		r.kernel.SetError(ipvstest.OpSetTimeouts, errors.New("injected"))
		dp := newDP(r, ipvs.Timeouts{TCPFin: 10 * s})
		if err := apply(dp); err == nil {
			t.Fatal("Apply with a failing SetTimeouts succeeded")
		}
		r.kernel.SetError(ipvstest.OpSetTimeouts, nil)
		if err := apply(dp); err != nil {
			t.Fatal(err)
		}
		if got, _ := r.kernel.Timeouts(); got.TCPFin != 10*s {
			t.Errorf("tcpfin timeout = %s, want 10s", got.TCPFin)
		}
	})

	t.Run("invalid timeouts are refused by New", func(t *testing.T) {
		r := newRig()
		if _, err := ipvs.New(ipvs.Config{Kernel: r.kernel, Addresses: r.addrs, Sysctls: r.sysctls, Timeouts: ipvs.Timeouts{UDP: 500 * time.Millisecond}}); err == nil {
			t.Error("New accepted a sub-second timeout")
		}
	})
}

//go:build peers

package netns_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/harness"
	"github.com/switchyard-lb/switchyard/test/netns"
)

func TestPeersNetnsBridgePing(t *testing.T) {
	netns.Require(t)
	sw := netns.NewBridge(t, "sw")
	a := netns.New(t, "a")
	b := netns.New(t, "b")
	macA := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}
	sw.Attach(t, a, "eth0", macA, netip.MustParsePrefix("10.0.0.11/24"), netip.MustParsePrefix("fd00::11/64"))
	sw.Attach(t, b, "eth0", nil, netip.MustParsePrefix("10.0.0.12/24"), netip.MustParsePrefix("fd00::12/64"))

	b.Run(t, "ping", "-c", "1", "-W", "2", "10.0.0.11")
	b.Run(t, "ping", "-c", "1", "-W", "2", "fd00::11")
	neigh := b.Run(t, "ip", "neigh", "show", "10.0.0.11")
	if !strings.Contains(neigh, macA.String()) {
		t.Errorf("b's neighbour entry for 10.0.0.11 = %q, want lladdr %s", neigh, macA)
	}
	if _, err := a.Exec("false"); err == nil {
		t.Error("Exec(false) returned no error")
	}
}

func TestPeersNetnsDo(t *testing.T) {
	netns.Require(t)
	sw := netns.NewBridge(t, "sw")
	a := netns.New(t, "a")
	sw.Attach(t, a, "sy-test0", nil, netip.MustParsePrefix("10.0.0.11/24"))

	var got []string
	err := a.Do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			got = append(got, i.Name)
		}
		return err
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if strings.Join(got, ",") != "lo,sy-test0" {
		t.Errorf("interfaces inside the namespace = %v, want [lo sy-test0]", got)
	}
	if _, err := net.InterfaceByName("sy-test0"); err == nil {
		t.Error("sy-test0 is visible outside the namespace after Do")
	}
	want := errors.New("boom")
	if err := a.Do(func() error { return want }); err != want {
		t.Errorf("Do returned %v, want fn's error", err)
	}
}

func TestPeersNetnsCleanup(t *testing.T) {
	netns.Require(t)
	var name string
	var pid int
	t.Run("inner", func(t *testing.T) {
		n := netns.New(t, "gone")
		name = n.Name()
		c := n.Start(t, "sleep", "300")
		pid = c.Process.Pid
		// Start returns once ip(8) is forked; it enters the namespace
		// (setns) a moment later, so "not yet" is not a failure: wait.
		harness.Poll(t, time.Minute, func() error {
			if out := strings.TrimSpace(n.Run(t, "ip", "netns", "identify", strconv.Itoa(pid))); out != name {
				return fmt.Errorf("started process is in netns %q, want %q", out, name)
			}
			return nil
		})
	})
	if _, err := os.Stat("/run/netns/" + name); !os.IsNotExist(err) {
		t.Errorf("netns %s still exists after cleanup (stat: %v)", name, err)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still alive after cleanup", pid)
	}
}

func TestPeersNetnsExecOutput(t *testing.T) {
	netns.Require(t)
	n := netns.New(t, "out")
	out, err := n.Exec("sh", "-c", "echo out; echo err >&2")
	if err != nil || out != "out\n" {
		t.Errorf("Exec = %q, %v; want standard output only and no error", out, err)
	}
	_, err = n.Exec("sh", "-c", "echo why >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "why") {
		t.Errorf("failing Exec error = %v, want it to carry standard error", err)
	}
}

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/switchyard-lb/switchyard/test/e2e/kpbench"
)

// switchProxies measures a node switching from kube-proxy to switchyard
// and back with switchyard's cleanup flags, and reads what each cleanup
// left of its proxy's objects.
func (b *bench) switchProxies() (kpbench.Switch, error) {
	var sw kpbench.Switch
	if b.o.kubeProxy == "" || b.o.switchyard == "" {
		return sw, errors.New("needs -kube-proxy and -switchyard")
	}
	if err := b.runUntilProgrammed(kpbench.KubeProxy, b.o.kubeProxy, kubeProxyArgs(b.o, "ipvs"), kubeProxySyncs, "/tmp/switch-kube-proxy.log"); err != nil {
		return sw, err
	}
	outageStart := time.Now()
	if err := b.cleanup("--cleanup-kube-proxy"); err != nil {
		return sw, err
	}
	sw.CleanupKubeProxy = time.Since(outageStart)
	sw.KubeProxyLeft = b.leftovers(kpbench.KubeProxy)

	// The daemon stays until its table is complete: that ends the outage.
	logFile, err := os.Create("/tmp/switch-switchyard.log")
	if err != nil {
		return sw, err
	}
	defer logFile.Close()
	cmd := exec.Command(b.o.switchyard, switchyardArgs(b.o)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return sw, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	err = b.waitComplete(exited)
	sw.Outage = time.Since(outageStart)
	if err == nil {
		err = poll(exited, b.o.syncTimeout, 250*time.Millisecond, func() (bool, error) {
			n, err := switchyardSyncs.read()
			return err == nil && n >= 1, nil
		})
	}
	stop(cmd, exited, b.out, kpbench.Switchyard)
	if err != nil {
		return sw, fmt.Errorf("switchyard after the kube-proxy cleanup: %w\n%s", err, tail("/tmp/switch-switchyard.log", 4<<10))
	}

	began := time.Now()
	if err := b.cleanup("--cleanup"); err != nil {
		return sw, err
	}
	sw.CleanupSwitchyard = time.Since(began)
	sw.SwitchyardLeft = b.leftovers(kpbench.Switchyard)
	return sw, nil
}

// runUntilProgrammed runs a proxy until its IPVS table is complete and its
// first sync ended, then stops it, leaving its state in the kernel.
func (b *bench) runUntilProgrammed(name, bin string, args []string, syncs syncMetric, logPath string) error {
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer stop(cmd, exited, b.out, name)
	if err := b.waitComplete(exited); err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, tail(logPath, 4<<10))
	}
	return poll(exited, b.o.syncTimeout, 250*time.Millisecond, func() (bool, error) {
		n, err := syncs.read()
		return err == nil && n >= 1, nil
	})
}

func (b *bench) waitComplete(exited <-chan error) error {
	err := poll(exited, b.o.completeTimeout, 250*time.Millisecond, func() (bool, error) {
		t, err := readTable()
		if err != nil {
			return false, err
		}
		return b.w.Missing(t) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("IPVS table never complete: %w", err)
	}
	return nil
}

// cleanup runs switchyard with a cleanup flag and prints its log.
func (b *bench) cleanup(flag string) error {
	out, err := exec.Command(b.o.switchyard, flag, "--log-format=text").CombinedOutput()
	fmt.Fprintf(b.out, "-- switchyard %s --\n%s", flag, out)
	if err != nil {
		return fmt.Errorf("switchyard %s: %w", flag, err)
	}
	return nil
}

// leftovers lists what is left of a proxy's objects: IPVS services (the
// guest has no others), its dummy link, nftables table, and kube-proxy's
// KUBE-* iptables chains and ipsets.
func (b *bench) leftovers(proxy string) []string {
	var left []string
	if svcs, err := b.k.Services(); err != nil {
		left = append(left, "IPVS unreadable: "+err.Error())
	} else if len(svcs) > 0 {
		left = append(left, fmt.Sprintf("%d IPVS services", len(svcs)))
	}
	dummy, table := "kube-ipvs0", "kube-proxy"
	if proxy == kpbench.Switchyard {
		dummy, table = "switchyard0", "switchyard"
	}
	if _, err := netlink.LinkByName(dummy); err == nil {
		left = append(left, "link "+dummy)
	}
	if c, err := nftables.New(); err == nil {
		if tables, err := c.ListTables(); err == nil {
			for _, t := range tables {
				if t.Name == table {
					left = append(left, "nftables table "+t.Name)
				}
			}
		}
	}
	if proxy == kpbench.KubeProxy {
		for _, table := range []string{"nat", "filter", "mangle"} {
			out, err := exec.Command("iptables-save", "-t", table).Output()
			if err != nil {
				left = append(left, "iptables-save: "+err.Error())
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, ":KUBE-") || (strings.HasPrefix(line, "-A ") && strings.Contains(line, " KUBE-")) {
					left = append(left, "iptables "+table+" "+line)
				}
			}
		}
		if out, err := exec.Command("ipset", "list", "-n").Output(); err != nil {
			left = append(left, "ipset: "+err.Error())
		} else {
			for _, name := range strings.Fields(string(out)) {
				if strings.HasPrefix(name, "KUBE-") {
					left = append(left, "ipset "+name)
				}
			}
		}
	}
	return left
}

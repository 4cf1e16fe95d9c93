package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/test/lab/guest"
	"github.com/vishvananda/netlink"
)

func main() {
	dir := flag.String("dir", "testdata", "directory holding switchyard, kubeconfig and config.yaml")
	node := flag.String("node", "node-a", "node name the daemon runs as")
	ready := flag.Duration("ready-timeout", 90*time.Second, "how long to wait for the daemon's /readyz")
	change := flag.Duration("wait-change", 0, "after the first listing, wait this long for the IPVS table to change and print what changed (0: do not wait)")
	flag.Parse()
	if err := run(*dir, *node, *ready, *change, os.Stdout); err != nil {
		fmt.Fprintf(os.Stdout, "labguest: %v\n", err)
		os.Exit(1)
	}
}

func run(dir, node string, readyTimeout, waitChange time.Duration, out io.Writer) error {
	if err := guest.ConfigureUserNet(); err != nil {
		return err
	}
	logPath := "/tmp/switchyard.log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create daemon log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(dir, "switchyard"),
		"--config", filepath.Join(dir, "config.yaml"),
		"--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--hostname-override", node)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start switchyard: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	if err := waitReady(exited, readyTimeout); err != nil {
		cmd.Process.Kill()
		dumpLog(out, logPath)
		return err
	}
	fmt.Fprintf(out, "== switchyard ready in the guest after %s (dataplane ipvs, node %s)\n", time.Since(start).Round(100*time.Millisecond), node)

	fmt.Fprintln(out, "== kernel IPVS table (read back over netlink, printed as ipvsadm -Ln)")
	table, err := kernelTable()
	if err != nil {
		return err
	}
	fmt.Fprint(out, dryrun.Format(table))

	fmt.Fprintln(out, "\n== addresses on switchyard0")
	if err := printAddrs(out, "switchyard0"); err != nil {
		return err
	}

	if nft, err := exec.LookPath("nft"); err == nil {
		// run.sh brings Debian's nft with its libraries (labrun -extra).
		fmt.Fprintln(out, "\n== nft list table inet switchyard")
		listing, err := exec.Command(nft, "list", "table", "inet", "switchyard").CombinedOutput()
		if err != nil {
			return fmt.Errorf("nft list table inet switchyard: %w: %s", err, listing)
		}
		out.Write(listing)
	} else {
		fmt.Fprintln(out, "\n== nftables table inet switchyard (no nft in the lab: chains and sets read over netlink)")
		if err := printNFT(out, "switchyard"); err != nil {
			return err
		}
	}

	if waitChange > 0 {
		fmt.Fprintf(out, "\n%s (up to %s)\n", WaitLine, waitChange)
		changed, err := waitTableChange(table, waitChange)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, "== the virtual services that changed, as the kernel now holds them")
		fmt.Fprint(out, dryrun.Format(changed))
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		fmt.Fprintf(out, "\n== switchyard stopped (%v)\n", exitText(err))
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		fmt.Fprintln(out, "\n== switchyard did not stop within 20s of SIGTERM; killed")
	}
	return nil
}

// WaitLine starts the line printed when the guest begins waiting for the
// IPVS table to change: the host makes its change once it sees it.
const WaitLine = "== waiting for the IPVS table to change"

// waitTableChange polls the kernel's IPVS table until it differs from
// before, and returns the virtual services that are new or changed.
func waitTableChange(before []model.VirtualService, timeout time.Duration) ([]model.VirtualService, error) {
	old := make(map[model.VirtualServiceKey]string, len(before))
	for _, vs := range before {
		old[vs.VirtualServiceKey] = dryrun.Format([]model.VirtualService{vs})
	}
	deadline := time.Now().Add(timeout)
	for {
		now, err := kernelTable()
		if err != nil {
			return nil, err
		}
		var changed []model.VirtualService
		for _, vs := range now {
			if old[vs.VirtualServiceKey] != dryrun.Format([]model.VirtualService{vs}) {
				changed = append(changed, vs)
			}
		}
		if len(changed) > 0 || len(now) != len(before) {
			return changed, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("IPVS table unchanged after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady polls the daemon's /readyz until it answers 200, the daemon
// exits, or timeout passes.
func waitReady(exited <-chan error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		if resp, err := client.Get("http://127.0.0.1:10256/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("switchyard exited before it was ready: %s", exitText(err))
		case <-ctx.Done():
			return fmt.Errorf("switchyard not ready after %s", timeout)
		case <-tick.C:
		}
	}
}

// kernelTable reads every IPVS virtual service and its real servers from
// the kernel, in the model types dryrun.Format renders.
func kernelTable() ([]model.VirtualService, error) {
	nl, err := ipvs.NewNetlink()
	if err != nil {
		return nil, fmt.Errorf("open IPVS netlink: %w", err)
	}
	defer nl.Close()
	svcs, err := nl.Services()
	if err != nil {
		return nil, fmt.Errorf("list IPVS services: %w", err)
	}
	ipvs.SortServices(svcs)
	out := make([]model.VirtualService, 0, len(svcs))
	for _, s := range svcs {
		dests, err := nl.Destinations(s.VirtualServiceKey)
		if err != nil {
			return nil, fmt.Errorf("list real servers: %w", err)
		}
		ipvs.SortDestinations(dests)
		vs := model.VirtualService{
			VirtualServiceKey: s.VirtualServiceKey,
			Scheduler:         s.Scheduler,
			Flags:             flagNames(s.Scheduler, s.Flags),
			AffinityTimeout:   s.Persistence,
		}
		for _, d := range dests {
			vs.Destinations = append(vs.Destinations, model.Destination{Addr: d.Addr, Port: d.Port, Weight: d.Weight})
		}
		out = append(out, vs)
	}
	return out, nil
}

// flagNames names the scheduler flags as ipvsadm prints them.
func flagNames(sched string, f ipvs.Flags) []string {
	var names []string
	for i, bit := range []ipvs.Flags{ipvs.FlagSchedOpt1, ipvs.FlagSchedOpt2, ipvs.FlagSchedOpt3} {
		if f&bit == 0 {
			continue
		}
		switch {
		case (sched == "sh" || sched == "mh") && i == 0:
			names = append(names, sched+"-fallback")
		case (sched == "sh" || sched == "mh") && i == 1:
			names = append(names, sched+"-port")
		default:
			names = append(names, fmt.Sprintf("flag-%d", i+1))
		}
	}
	return names
}

func printAddrs(out io.Writer, name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", name, err)
	}
	a := link.Attrs()
	fmt.Fprintf(out, "%s: type %s, %s, %d addresses\n", name, link.Type(), a.OperState, len(addrs))
	for _, ad := range addrs {
		fmt.Fprintf(out, "    inet %s\n", ad.IPNet)
	}
	return nil
}

func printNFT(out io.Writer, table string) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open nftables: %w", err)
	}
	defer conn.CloseLasting()
	t, err := conn.ListTableOfFamily(table, nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("find table inet %s: %w", table, err)
	}
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	for _, c := range chains {
		if c.Table.Name != t.Name {
			continue
		}
		rules, err := conn.GetRules(t, c)
		if err != nil {
			return fmt.Errorf("list rules of chain %s: %w", c.Name, err)
		}
		fmt.Fprintf(out, "  chain %s", c.Name)
		if c.Hooknum != nil {
			fmt.Fprintf(out, " (type %s hook %d priority %d)", c.Type, *c.Hooknum, prio(c.Priority))
		}
		fmt.Fprintf(out, ": %d rules\n", len(rules))
	}
	sets, err := conn.GetSets(t)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		elems, err := conn.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("list elements of set %s: %w", s.Name, err)
		}
		fmt.Fprintf(out, "  set %s: %d elements\n", s.Name, len(elems))
	}
	return nil
}

func prio(p *nftables.ChainPriority) int32 {
	if p == nil {
		return 0
	}
	return int32(*p)
}

func dumpLog(out io.Writer, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(data) > 8<<10 {
		data = data[len(data)-8<<10:]
	}
	fmt.Fprintf(out, "-- switchyard log (tail) --\n%s\n", data)
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

//go:build linux

package labtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-lb/switchyard/ipvs/cleanup"
)

// TestCleanupKubeProxyIPTables creates kube-proxy's iptables chains of
// both families, the jumps to them and its ipsets with the real iptables
// and ip6tables (nft backend) and
// ipset in a namespace of its own, next to foreign ones and the
// kubelet's canary, runs the kube-proxy cleanup, and reads back what is
// left: only the foreign objects and the kubelet's. The guest has these
// programs only when they are brought in: `make test-lab-cleanup` does;
// `make test-lab` skips this test.
// netfilterToolsEnv, set by `make test-lab-cleanup`, says the guest was
// given iptables and ipset: missing, they fail the test instead of skipping
// it, so that make test never passes it silently.
const netfilterToolsEnv = "SWITCHYARD_LAB_NETFILTER_TOOLS"

func TestCleanupKubeProxyIPTables(t *testing.T) {
	requireGuest(t)
	for _, tool := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore", "ipset"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(netfilterToolsEnv) != "" {
				t.Fatalf("%s is not in the guest, which %s says was given it: %v", tool, netfilterToolsEnv, err)
			}
			t.Skipf("%s is not in the guest: run `make test-lab-cleanup`", tool)
		}
	}
	ns, err := newNamespace("cleanup-iptables")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.close()
	run := func(name string, args ...string) (string, error) {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	// Inside ns.Do, failures are returned (Do runs on another goroutine).
	err = ns.Do(func() error {
		for _, cmd := range [][]string{
			{"ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port"},
			{"ipset", "create", "KUBE-LOOP-BACK", "hash:ip,port,ip"},
			{"ipset", "create", "foreign-set", "hash:ip"},
			{"iptables", "-t", "nat", "-N", "KUBE-SERVICES"},
			{"iptables", "-t", "nat", "-N", "KUBE-MARK-MASQ"},
			{"iptables", "-t", "nat", "-N", "KUBE-POSTROUTING"},
			{"iptables", "-t", "nat", "-N", "CNI-FOREIGN"},
			{"iptables", "-t", "nat", "-N", "KUBE-KUBELET-CANARY"},
			{"iptables", "-t", "nat", "-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
			{"iptables", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
			{"iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"},
			{"iptables", "-t", "nat", "-A", "POSTROUTING", "-j", "CNI-FOREIGN"},
			{"iptables", "-t", "nat", "-A", "CNI-FOREIGN", "-p", "tcp", "--dport", "8443", "-j", "KUBE-MARK-MASQ"},
			{"iptables", "-t", "nat", "-A", "KUBE-SERVICES", "-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "KUBE-MARK-MASQ"},
			{"iptables", "-t", "nat", "-A", "KUBE-POSTROUTING", "-m", "set", "--match-set", "KUBE-LOOP-BACK", "dst,dst,src", "-j", "MASQUERADE"},
			{"iptables", "-t", "nat", "-A", "KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", "0x4000"},
			{"iptables", "-t", "filter", "-N", "KUBE-FORWARD"},
			{"iptables", "-t", "filter", "-A", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"},
			{"iptables", "-t", "filter", "-A", "FORWARD", "-s", "10.0.0.0/8", "-j", "ACCEPT"},
			{"iptables", "-t", "mangle", "-N", "KUBE-PROXY-CANARY"},
			// The IPv6 proxier's, beside foreign IPv6 ones.
			{"ip6tables", "-t", "nat", "-N", "KUBE-SERVICES"},
			{"ip6tables", "-t", "nat", "-N", "KUBE-MARK-MASQ"},
			{"ip6tables", "-t", "nat", "-N", "KUBE-POSTROUTING"},
			{"ip6tables", "-t", "nat", "-N", "CNI-FOREIGN6"},
			{"ip6tables", "-t", "nat", "-N", "KUBE-KUBELET-CANARY"},
			{"ip6tables", "-t", "nat", "-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
			{"ip6tables", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
			{"ip6tables", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"},
			{"ip6tables", "-t", "nat", "-A", "POSTROUTING", "-j", "CNI-FOREIGN6"},
			{"ip6tables", "-t", "nat", "-A", "KUBE-SERVICES", "-d", "fd00:10:96::/112", "-j", "KUBE-MARK-MASQ"},
			{"ip6tables", "-t", "nat", "-A", "KUBE-POSTROUTING", "-m", "mark", "--mark", "0x4000/0x4000", "-j", "MASQUERADE"},
			{"ip6tables", "-t", "nat", "-A", "KUBE-MARK-MASQ", "-j", "MARK", "--or-mark", "0x4000"},
			{"ip6tables", "-t", "filter", "-N", "KUBE-FORWARD"},
			{"ip6tables", "-t", "filter", "-A", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"},
			{"ip6tables", "-t", "filter", "-A", "FORWARD", "-s", "fd00::/8", "-j", "ACCEPT"},
			{"ip6tables", "-t", "mangle", "-N", "KUBE-PROXY-CANARY"},
		} {
			if _, err := run(cmd[0], cmd[1:]...); err != nil {
				return err
			}
		}
		h, closeHost, err := cleanup.Open()
		if err != nil {
			return err
		}
		defer closeHost()
		r, err := cleanup.KubeProxy(context.Background(), h)
		if err != nil {
			return fmt.Errorf("KubeProxy: %w", err)
		}
		t.Logf("removed %q, skipped %q", r.Removed, r.Skipped)
		if os.Getenv(netfilterToolsEnv) != "" && len(r.Skipped) > 0 {
			t.Errorf("the cleanup skipped %q with every tool lent to the guest", r.Skipped)
		}

		for save, tables := range map[string]map[string][]string{
			"iptables-save": {
				"nat":    {":CNI-FOREIGN", ":KUBE-KUBELET-CANARY", "-A POSTROUTING -j CNI-FOREIGN"},
				"filter": {"-A FORWARD -s 10.0.0.0/8 -j ACCEPT"},
				"mangle": nil,
			},
			"ip6tables-save": {
				"nat":    {":CNI-FOREIGN6", ":KUBE-KUBELET-CANARY", "-A POSTROUTING -j CNI-FOREIGN6"},
				"filter": {"-A FORWARD -s fd00::/8 -j ACCEPT"},
				"mangle": nil,
			},
		} {
			for table, want := range tables {
				out, err := run(save, "-t", table)
				if err != nil {
					return err
				}
				var kept []string
				for _, line := range strings.Split(out, "\n") {
					switch {
					case strings.HasPrefix(line, "-A "):
						kept = append(kept, line)
					case strings.HasPrefix(line, ":") && !builtinChain(line):
						kept = append(kept, strings.Fields(line)[0])
					}
				}
				if !slices.Equal(kept, want) {
					t.Errorf("%s -t %s after the cleanup: %q, want %q\n%s", save, table, kept, want, out)
				}
			}
		}
		sets, err := run("ipset", "list", "-n")
		if err != nil {
			return err
		}
		if got := strings.Fields(sets); !slices.Equal(got, []string{"foreign-set"}) {
			t.Errorf("ipsets after the cleanup: %q, want only foreign-set", got)
		}
		for _, want := range []string{
			"iptables IPv4 chain nat KUBE-SERVICES", "iptables IPv4 chain mangle KUBE-PROXY-CANARY", "ipset KUBE-LOOP-BACK",
			"iptables IPv6 chain nat KUBE-SERVICES", "iptables IPv6 chain filter KUBE-FORWARD", "iptables IPv6 chain mangle KUBE-PROXY-CANARY",
		} {
			if !slices.Contains(r.Removed, want) {
				t.Errorf("report lacks %q: %q", want, r.Removed)
			}
		}
		if r, err := cleanup.KubeProxy(context.Background(), h); err != nil || len(r.Removed) != 0 {
			t.Errorf("second KubeProxy = %q, %v; want nothing removed, no error", r.Removed, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// builtinChain reports whether an iptables-save chain line declares a
// built-in chain (one with a policy).
func builtinChain(line string) bool {
	f := strings.Fields(line)
	return len(f) > 1 && f[1] != "-"
}

//go:build linux

package dsrlab

import (
	"os"
	"os/exec"
	"testing"

	"github.com/switchyard-lb/switchyard/test/netns"
)

// dump logs each namespace's links, routes, IPVS table and connections
// and nftables ruleset, when the guest has the tools (labrun -extra
// /usr/sbin/ip,/usr/sbin/nft), for a failing test.
func (tp *topology) dump(t *testing.T) {
	t.Helper()
	spaces := []struct {
		name string
		ns   *netns.Unnamed
	}{{"client", tp.client}, {"router", tp.router}}
	for _, n := range tp.nodes {
		spaces = append(spaces, struct {
			name string
			ns   *netns.Unnamed
		}{n.name, n.ns})
	}
	for _, s := range spaces {
		for _, cmd := range [][]string{
			{"ip", "-s", "link"}, {"ip", "addr"}, {"ip", "route"}, {"nft", "list", "ruleset"},
			{"ipvsadm", "-Ln", "--stats"}, {"cat", "/proc/net/ip_vs_conn"}, {"cat", "/proc/net/snmp"},
			{"sh", "-c", "grep -r . /proc/sys/net/ipv4/vs/sloppy_tcp /proc/sys/net/ipv4/conf/*/rp_filter"},
		} {
			if _, err := exec.LookPath(cmd[0]); err != nil {
				continue
			}
			var out []byte
			s.ns.Do(func() error {
				c := exec.Command(cmd[0], cmd[1:]...)
				c.Env = os.Environ()
				out, _ = c.CombinedOutput()
				return nil
			})
			t.Logf("%s: %v\n%s", s.name, cmd, out)
		}
	}
}

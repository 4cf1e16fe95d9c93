package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// FRR's Debian paths: its daemons, its shell, and what they need besides
// their libraries: the frr user and groups they drop to.
const (
	FRRDaemons = "/usr/lib/frr"
	Vtysh      = "/usr/bin/vtysh"
)

// FRRFiles are the host paths a guest needs to run the router's FRR
// (lab.Job.Extra brings their libraries along).
var FRRFiles = []string{FRRDaemons + "/zebra", FRRDaemons + "/bfdd", FRRDaemons + "/bgpd", Vtysh, "/etc/passwd", "/etc/group"}

// vtyshConf is where vtysh reads its own configuration.
const vtyshConf = "/etc/frr/vtysh.conf"

// frrStart bounds how long zebra and bgpd may take to answer.
const frrStart = 30 * time.Second

// FRR is zebra and bgpd in the router's namespace, peering with every
// node's daemon (eBGP, RouterASN to NodeASN) and installing ECMP routes
// (maximum-paths 8) with layer-4 multipath hashing of each packet's
// headers (fib_multipath_hash_policy=3 over addresses, protocol and
// ports: see startFRR).
type FRR struct {
	ns    *Namespace
	dir   string
	bfd   bool // bfdd runs too (StartFRR)
	procs []*frrProc
}

type frrProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// frrConf is bgpd's configuration for the nodes. Timers 3/9 s (a hold
// time of 3 s flapped on the loaded lab machine) and a connect retry of
// 1 s: a node that stops answering is dropped in 9 s; a daemon that dies
// closes its session, dropped at once.
func frrConf(nodes []*Node) string {
	var b strings.Builder
	fmt.Fprintf(&b, `frr defaults traditional
hostname router
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp default ipv4-unicast
 bgp log-neighbor-changes
 neighbor NODES peer-group
 neighbor NODES remote-as %d
 neighbor NODES timers 3 9
 neighbor NODES timers connect 1
`, RouterASN, RouterLAN, NodeASN)
	for _, n := range nodes {
		fmt.Fprintf(&b, " neighbor %s peer-group NODES\n", n.Addr)
	}
	neighbors6, family6 := frrConf6(nodes)
	b.WriteString(neighbors6)
	b.WriteString(` address-family ipv4 unicast
  neighbor NODES activate
  maximum-paths 8
 exit-address-family
`)
	b.WriteString(family6)
	return b.String()
}

// zebraConf keeps zebra's routes in the classic RTA_MULTIPATH form
// rather than kernel nexthop objects, so that RouterNextHops reads each
// gateway from the route itself.
const zebraConf = `hostname router
no zebra nexthop kernel enable
`

// startFRR starts the router's zebra and bgpd in ns with their state in
// a fresh directory, and returns once bgpd's vty answers.
func startFRR(ctx context.Context, ns *Namespace, nodes []*Node) (*FRR, error) {
	return StartFRR(ctx, ns, frrConf(nodes), false)
}

// StartFRR starts zebra, bfdd when bfd is set, and bgpd with bgpdConf in
// ns (a LAN router of AddLANRouter, or the router's), with their state in
// a fresh directory, and returns once bgpd's vty answers. Close stops
// them.
func StartFRR(ctx context.Context, ns *Namespace, bgpdConf string, bfd bool) (_ *FRR, err error) {
	// Policy 1 (layer 4) would take a forwarded packet's hash from the
	// sender's socket when it has one, and in one kernel it does: the
	// client's packets reach the router over veth with their socket's
	// txhash, which TCP changes on a retransmission timeout, moving the
	// flow to another node (which resets it). Policy 3 hashes the
	// packet's headers, as a separate router does: source and
	// destination address, protocol, source and destination port.
	if err := ns.Sysctl("net/ipv4/fib_multipath_hash_policy", "3"); err != nil {
		return nil, err
	}
	if err := ns.Sysctl("net/ipv4/fib_multipath_hash_fields", "0x0037"); err != nil {
		return nil, err
	}
	u, err := user.Lookup("frr")
	if err != nil {
		return nil, fmt.Errorf("cluster: FRR's user (lent /etc/passwd?): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "cluster-frr-")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	r := &FRR{ns: ns, dir: dir, bfd: bfd}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	// The daemons run as frr: their state directory, and the ones they
	// create on their own, are frr's.
	for _, d := range []string{dir, "/var/tmp/frr", "/var/run/frr"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	// vtysh authenticates its user with PAM, which the guest lacks,
	// unless its own config (a fixed path) lets the user in. A host's
	// file is left alone.
	if _, err := os.Stat(vtyshConf); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(vtyshConf), 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if err := os.WriteFile(vtyshConf, []byte("username root nopassword\n"), 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	for name, body := range map[string]string{"zebra.conf": zebraConf, "bfdd.conf": "", "bgpd.conf": bgpdConf} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	if err := r.launch(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// launch starts zebra, then bfdd (when r.bfd: before bgpd, so that
// bgpd's "neighbor ... bfd" registers with it), then bgpd, and returns
// once bgpd's vty answers.
func (r *FRR) launch(ctx context.Context) error {
	if err := r.start("zebra"); err != nil {
		return err
	}
	if err := r.waitFor(ctx, "zebra's zserv socket", func() error {
		_, err := os.Stat(filepath.Join(r.dir, "zserv.api"))
		return err
	}); err != nil {
		return err
	}
	if r.bfd {
		// Its control socket in the state directory, not the shared
		// /var/run/frr.
		if err := r.start("bfdd", "--bfdctl", filepath.Join(r.dir, "bfdd.sock")); err != nil {
			return err
		}
		if err := r.waitFor(ctx, "bfdd's vty", func() error {
			_, err := r.Vtysh(ctx, "show bfd peers")
			return err
		}); err != nil {
			return err
		}
	}
	if err := r.start("bgpd"); err != nil {
		return err
	}
	return r.waitFor(ctx, "bgpd's vty", func() error {
		_, err := r.Vtysh(ctx, "show bgp summary")
		return err
	})
}

func (r *FRR) start(name string, extra ...string) error {
	d := r.dir
	out, err := os.Create(filepath.Join(d, name+".out"))
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	args := []string{"-P", "0", "--vty_socket", d, "-z", d + "/zserv.api",
		"-i", d + "/" + name + ".pid", "-f", d + "/" + name + ".conf", "--log", "file:" + d + "/" + name + ".log"}
	cmd := exec.Command(filepath.Join(FRRDaemons, name), append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.ns.Command(cmd); err != nil {
		out.Close()
		return err
	}
	p := &frrProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	r.procs = append(r.procs, p)
	return nil
}

func (r *FRR) waitFor(ctx context.Context, what string, ok func() error) error {
	deadline := time.Now().Add(frrStart)
	for {
		err := ok()
		if err == nil {
			return nil
		}
		for _, p := range r.procs {
			select {
			case <-p.done:
				return fmt.Errorf("cluster: FRR: %s exited while waiting for %s; log:\n%s", filepath.Base(p.cmd.Path), what, r.Log(3000))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: FRR: %s: %w; log:\n%s", what, err, r.Log(3000))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Vtysh runs the vtysh commands, in order, in the router's namespace and
// returns their output.
func (r *FRR) Vtysh(ctx context.Context, cmds ...string) (string, error) {
	args := []string{"--vty_socket", r.dir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	return r.ns.output(ctx, Vtysh, args...)
}

// output runs program in the namespace and returns what it wrote to
// stdout and stderr, with an error naming its arguments when it fails.
func (ns *Namespace) output(ctx context.Context, program string, args ...string) (string, error) {
	var out strings.Builder
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := ns.Command(cmd); err != nil {
		return "", err
	}
	if err := cmd.Wait(); err != nil {
		return out.String(), fmt.Errorf("cluster: %s %s: %w: %s", filepath.Base(program), strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Log returns the last max bytes of each daemon's log and output.
func (r *FRR) Log(max int) string {
	var b strings.Builder
	for _, f := range []string{"zebra.out", "zebra.log", "bfdd.out", "bfdd.log", "bgpd.out", "bgpd.log"} {
		data, err := os.ReadFile(filepath.Join(r.dir, f))
		if errors.Is(err, os.ErrNotExist) || len(data) == 0 {
			continue
		}
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// LogLines returns the lines of bgpd's log that match.
func (r *FRR) LogLines(match func(string) bool) []string {
	data, err := os.ReadFile(filepath.Join(r.dir, "bgpd.log"))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if match(line) {
			out = append(out, strings.TrimSuffix(line, "\n"))
		}
	}
	return out
}

// Close stops bgpd, bfdd and zebra (SIGTERM, then SIGKILL after 5 s) and
// removes their state.
func (r *FRR) Close() {
	r.stop()
	os.RemoveAll(r.dir)
}

// stop stops bgpd, bfdd and zebra (SIGTERM, then SIGKILL after 5 s).
func (r *FRR) stop() {
	for i := len(r.procs) - 1; i >= 0; i-- {
		p := r.procs[i]
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			killGroup(p.cmd.Process.Pid)
			<-p.done
		}
	}
	r.procs = nil
}

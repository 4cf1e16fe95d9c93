package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// BIRD's Debian paths (package bird2): the daemon and its control client.
const (
	BIRDDaemon = "/usr/sbin/bird"
	Birdc      = "/usr/sbin/birdc"
)

// BIRDFiles are the host paths a guest needs to run BIRD on a LAN router
// (lab.Job.Extra brings their libraries along).
var BIRDFiles = []string{BIRDDaemon, Birdc}

// LANRouter is a router namespace of its own on the nodes' LAN, beside
// the router: a second BGP router the nodes' daemons can peer with
// (StartFRR, StartBIRD) whose kernel routes tell what it installed
// (Namespace.NextHops). It forwards nothing for the client.
type LANRouter struct {
	NS   *Namespace
	Addr netip.Addr // on the LAN (its eth0)

	router *Namespace // holds its LAN port
	port   string
}

// AddLANRouter plugs a new namespace named name into the LAN with addr
// (in LANPrefix, not a node's nor the router's). Close unplugs it.
func (t *Topology) AddLANRouter(name string, addr netip.Addr) (_ *LANRouter, err error) {
	if !LANPrefix.Contains(addr) || addr == RouterLAN || t.NodeOf(addr) != nil {
		return nil, fmt.Errorf("cluster: LAN router %s at %s: want a free address of %s", name, addr, LANPrefix)
	}
	ns, err := newNamespace(name)
	if err != nil {
		return nil, err
	}
	r := &LANRouter{NS: ns, Addr: addr, router: t.Router, port: "lan-" + name}
	if len(r.port) > unix.IFNAMSIZ-1 {
		ns.close()
		return nil, fmt.Errorf("cluster: LAN router %s: name too long for its port %q", name, r.port)
	}
	err = t.Router.configure(func(h *netlink.Handle) error {
		if err := veth(h, r.port, netip.Prefix{}, ns, "eth0", netip.PrefixFrom(addr, LANPrefix.Bits()), RouterLAN); err != nil {
			return err
		}
		return enslave(h, r.port, "lan0")
	})
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Close unplugs the router from the LAN and releases its namespace
// (stop the daemons running in it first).
func (r *LANRouter) Close() {
	_ = r.router.configure(func(h *netlink.Handle) error {
		if l, err := h.LinkByName(r.port); err == nil {
			return h.LinkDel(l)
		}
		return nil
	})
	r.NS.close()
}

// BIRD is BIRD 2 in a namespace, with its state in a directory of its
// own.
type BIRD struct {
	ns   *Namespace
	dir  string
	proc *frrProc
}

// birdStart bounds how long BIRD may take to answer.
const birdStart = 30 * time.Second

// StartBIRD writes conf and starts BIRD in ns, and returns once its
// control socket answers. Close stops it.
func StartBIRD(ctx context.Context, ns *Namespace, conf string) (_ *BIRD, err error) {
	dir, err := os.MkdirTemp("", "cluster-bird-")
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	r := &BIRD{ns: ns, dir: dir}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "bird.conf"), []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	out, err := os.Create(filepath.Join(dir, "bird.out"))
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cmd := exec.Command(BIRDDaemon, "-f", "-c", filepath.Join(dir, "bird.conf"), "-s", r.ctl(), "-P", filepath.Join(dir, "bird.pid"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ns.Command(cmd); err != nil {
		out.Close()
		return nil, err
	}
	r.proc = &frrProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(r.proc.done)
	}()
	deadline := time.Now().Add(birdStart)
	for {
		_, err := r.Birdc(ctx, "show", "status")
		if err == nil {
			return r, nil
		}
		select {
		case <-r.proc.done:
			return nil, fmt.Errorf("cluster: BIRD exited at start: %w; output:\n%s", err, r.Log(3000))
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster: BIRD does not answer: %w; output:\n%s", err, r.Log(3000))
		}
	}
}

func (r *BIRD) ctl() string { return filepath.Join(r.dir, "bird.ctl") }

// Birdc runs one birdc command in the router's namespace and returns its
// output.
func (r *BIRD) Birdc(ctx context.Context, args ...string) (string, error) {
	return r.ns.output(ctx, Birdc, append([]string{"-s", r.ctl()}, args...)...)
}

// Log returns the last max bytes of BIRD's output.
func (r *BIRD) Log(max int) string {
	data, err := os.ReadFile(filepath.Join(r.dir, "bird.out"))
	if err != nil {
		return err.Error()
	}
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// Close stops BIRD (SIGTERM, then SIGKILL after 5 s) and removes its
// state.
func (r *BIRD) Close() {
	if r.proc != nil {
		_ = syscall.Kill(r.proc.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-r.proc.done:
		case <-time.After(5 * time.Second):
			killGroup(r.proc.cmd.Process.Pid)
			<-r.proc.done
		}
		r.proc = nil
	}
	os.RemoveAll(r.dir)
}

// ReniceDaemon sets the nice value of every thread of the node's running
// daemon (threads it starts later inherit it): a node that runs BFD at
// 300 ms x 3 gives the daemon CPU of its own (a Guaranteed pod), which a
// negative nice stands for on the one guest CPU. A restart runs it at 0
// again.
func (n *Node) ReniceDaemon(nice int) error {
	d := n.daemon
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return fmt.Errorf("cluster: %s: no daemon running", n.Name)
	}
	return eachThread(d.cmd.Process.Pid, func(tid int) error {
		return unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
	})
}

// eachThread calls fn with the id of every thread of process pid; a
// thread that exits meanwhile is skipped.
func eachThread(pid int, fn func(tid int) error) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return fmt.Errorf("cluster: threads of %d: %w", pid, err)
	}
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if err := fn(tid); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("cluster: thread %d of %d: %w", tid, pid, err)
		}
	}
	return nil
}

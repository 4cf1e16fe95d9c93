package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// MaxGuests bounds Options.Guests: the bridge's /24 and the pod CIDRs
// have room for more, the 2 cores of a TCG host do not (each guest wants
// about 2.5 GB and a core of its own under load).
const MaxGuests = 3

// Guest is one node of the lab: a VM with its own kernel (its own IPVS
// table, nftables, conntrack and routes, which is what a service proxy
// programs), disk, 9p share and kubelet, its tap on the namespace's
// bridge. The first has the names and addresses of the constants
// (NodeName, NodeIP, NodeMAC, TapName, PodCIDR); the others count on
// from them: node2 is 192.168.100.3, 52:54:00:53:59:03, synode1,
// 10.244.1.0/24.
type Guest struct {
	Name    string // the Node's name and the guest's hostname
	IP      string // its NIC's address, the Node's InternalIP
	MAC     string
	Tap     string
	PodCIDR string // its CNI host-local range; the others route it via IP
	// Index is its place, from 0.
	Index int
	// dir holds its share and console: the node's state directory for
	// the first (the layout of a one-guest node), dir/NAME for the others.
	dir string
}

// guestAt is guest i of the node whose state is in dir.
func guestAt(dir string, i int) *Guest {
	first := netip.MustParseAddr(NodeIP).As4()
	first[3] += byte(i)
	g := &Guest{
		Name:    "node" + strconv.Itoa(i+1),
		IP:      netip.AddrFrom4(first).String(),
		MAC:     fmt.Sprintf("%s%02x", NodeMAC[:len(NodeMAC)-2], 2+i),
		Tap:     "synode" + strconv.Itoa(i),
		PodCIDR: fmt.Sprintf("10.244.%d.0/24", i),
		Index:   i,
		dir:     dir,
	}
	if i > 0 {
		g.dir = filepath.Join(dir, g.Name)
	}
	return g
}

// guestsAt are the n guests of the node whose state is in dir.
func guestsAt(dir string, n int) []*Guest {
	out := make([]*Guest, n)
	for i := range out {
		out[i] = guestAt(dir, i)
	}
	return out
}

// guestCountFile records how many guests Up started, for Open.
const guestCountFile = "guests"

// readGuestCount is what Up recorded in dir; 1 for a state directory
// written before there were more.
func readGuestCount(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, guestCountFile))
	if err != nil {
		return 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > MaxGuests {
		return 1
	}
	return n
}

func (g *Guest) share() string   { return filepath.Join(g.dir, "share") }
func (g *Guest) console() string { return filepath.Join(g.dir, "console.log") }

// qemuName is the guest's qemu in the state directory's pids and logs.
func (g *Guest) qemuName() string {
	if g.Index == 0 {
		return "qemu"
	}
	return "qemu-" + g.Name
}

// routes are the other guests' pod CIDRs, each via its guest, as
// guest/init.sh's ROUTES wants them (CIDR=VIA): one L2, no overlay.
func (g *Guest) routes(all []*Guest) []string {
	var out []string
	for _, o := range all {
		if o.Index != g.Index {
			out = append(out, o.PodCIDR+"="+o.IP)
		}
	}
	return out
}

var agentSeq atomic.Int64

// ExitError is a guest command that ran and exited non-zero.
type ExitError struct {
	Code   int
	Output string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("exit status %d: %s", e.Code, strings.TrimSpace(e.Output))
}

// Exec runs script with sh in the guest (as root, in /root) and returns
// its standard output and error. A non-zero exit is an *ExitError; ctx
// bounds the wait (the script keeps running in the guest).
func (g *Guest) Exec(ctx context.Context, script string) (string, error) {
	dir := filepath.Join(g.share(), "agent")
	id := fmt.Sprintf("%d-%d-%d", os.Getpid(), time.Now().UnixNano(), agentSeq.Add(1))
	base := filepath.Join(dir, id)
	if err := os.WriteFile(base+".tmp", []byte(script), 0o644); err != nil {
		return "", fmt.Errorf("node: exec on %s: %w", g.Name, err)
	}
	if err := os.Rename(base+".tmp", base+".sh"); err != nil {
		return "", fmt.Errorf("node: exec on %s: %w", g.Name, err)
	}
	var rc []byte
	err := poll(ctx, "guest command on "+g.Name, func() error {
		var err error
		rc, err = os.ReadFile(base + ".rc")
		return err
	}, nil)
	if err != nil {
		return "", err
	}
	out, _ := os.ReadFile(base + ".out")
	for _, ext := range []string{".rc", ".out", ".run"} {
		os.Remove(base + ext)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(rc)))
	if err != nil {
		return string(out), fmt.Errorf("node: exec on %s: malformed exit status %q", g.Name, rc)
	}
	if code != 0 {
		return string(out), &ExitError{Code: code, Output: string(out)}
	}
	return string(out), nil
}

// GuestFilesDir is where PutFile's files are in the guest (the share).
const GuestFilesDir = "/mnt/host/files"

// PutFile writes data to the guest's share as name and returns its path
// in the guest (under GuestFilesDir): a binary or a configuration a guest
// command then runs or reads.
func (g *Guest) PutFile(name string, data []byte, mode os.FileMode) (string, error) {
	dir := filepath.Join(g.share(), "files")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path+".tmp", data, mode); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	return GuestFilesDir + "/" + name, nil
}

// Import imports img into the guest's containerd unless its disk already
// has this content (guest/init.sh's markers) and containerd still has the
// reference, as Up does for Options.Images: a node reused by another
// command gets the current image.
func (g *Guest) Import(ctx context.Context, img Image) error {
	name, err := img.importName()
	if err != nil {
		return err
	}
	if err := copyFile(img.Path, filepath.Join(g.share(), "images", name+".tar")); err != nil {
		return err
	}
	marker := "/var/lib/switchyard-node/imported/" + name
	script := fmt.Sprintf("{ [ -e %[1]s ] && ctr -n k8s.io images ls -q | grep -q '%[3]s$'; } || { ctr -n k8s.io images import --platform linux/amd64 /mnt/host/images/%[2]s.tar >/dev/null && touch %[1]s; }", marker, name, img.Ref)
	if _, err := g.Exec(ctx, script); err != nil {
		return fmt.Errorf("node: import %s on %s: %w", img.Ref, g.Name, err)
	}
	return nil
}

// mark reads a stage marker guest/init.sh wrote: the guest's uptime in
// seconds when it reached the stage.
func (g *Guest) mark(stage string) (float64, bool) {
	b, err := os.ReadFile(filepath.Join(g.share(), "state", stage))
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	return v, err == nil
}

// imported fails until the guest has imported its images, and for good
// (errGone) once an import failed.
func (g *Guest) imported() error {
	if b, err := os.ReadFile(filepath.Join(g.share(), "state", "import-failed")); err == nil {
		return fmt.Errorf("%w: import on %s failed: %s", errGone, g.Name, strings.TrimSpace(string(b)))
	}
	if _, ok := g.mark("images"); !ok {
		return errors.New(g.Name + " not yet")
	}
	return nil
}

// bootFailed is the boot's own failure, from the console, or nil.
func (g *Guest) bootFailed() error {
	if c := tail(g.console(), 5); strings.Contains(c, "node boot:") && !strings.Contains(c, "switching root") {
		return fmt.Errorf("%s: boot failed: %s", g.Name, c)
	}
	return nil
}

// Command nodelab brings test/node's real Kubernetes node up and down and
// runs commands on it (make node-up, make node-down):
//
//	nodelab up -kube-bin DIR -rootfs FILE -userland FILE [-image REF=ARCHIVE]... [-nodes N] [-mem MB] [-cpus N]
//	nodelab down
//	nodelab kubectl ARGS...      kubectl with the admin kubeconfig, in the node's namespace
//	nodelab host CMD ARGS...     any host command in the node's namespace (curl a pod IP)
//	nodelab exec [-node NAME] SCRIPT
//	                             a shell script in a guest (default the first), through its command agent
//
// up, down and exec take flags after the command; -dir is the state directory
// (default $SWITCHYARD_CACHE/node/run, which the other commands use).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/switchyard-lb/switchyard/test/node"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodelab:", err)
	}
	os.Exit(code)
}

type imageFlags []node.Image

func (f *imageFlags) String() string { return fmt.Sprint(*f) }
func (f *imageFlags) Set(s string) error {
	ref, path, ok := strings.Cut(s, "=")
	if !ok || ref == "" || path == "" {
		return errors.New("want REF=ARCHIVE")
	}
	*f = append(*f, node.Image{Ref: ref, Path: path})
	return nil
}

func run(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("nodelab", flag.ContinueOnError)
	dir := fs.String("dir", node.DefaultDir(), "state directory")
	kubeBin := fs.String("kube-bin", "", "directory of the kube binaries (test/tools/kube-binaries.sh --kubelet --control-plane --agnhost --coredns)")
	rootfs := fs.String("rootfs", "", "the node's ext4 root filesystem (test/node/rootfs.sh)")
	userland := fs.String("userland", "", "agnhost's userland tar (test/node/userland.sh)")
	mem := fs.Int("mem", 0, "guest memory in MiB (default 2048)")
	cpus := fs.Int("cpus", 0, "guest CPUs (default 2)")
	guests := fs.Int("nodes", 1, fmt.Sprintf("how many nodes (guests) to run, 1 to %d", node.MaxGuests))
	guestName := fs.String("node", node.NodeName, "exec: the guest to run the script in")
	var images imageFlags
	fs.Var(&images, "image", "REF=ARCHIVE: a docker archive to import too (repeatable)")
	if len(args) == 0 {
		return 2, errors.New("usage: nodelab up|down|kubectl|host|exec [flags] [args]")
	}
	command, rest := args[0], args[1:]
	if command == "up" || command == "down" || command == "exec" {
		if err := fs.Parse(rest); err != nil {
			return 2, nil
		}
		rest = fs.Args()
	}
	switch command {
	case "up":
		if *kubeBin == "" || *rootfs == "" || *userland == "" {
			return 2, errors.New("up needs -kube-bin, -rootfs and -userland")
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, nil))
		n, err := node.Up(ctx, node.Options{
			Dir: *dir, KubeBin: *kubeBin, Rootfs: *rootfs, Userland: *userland, Images: images,
			Guests: *guests, MemoryMB: *mem, CPUs: *cpus, Log: log,
		})
		if err != nil {
			return 1, err
		}
		defer n.Close()
		names := make([]string, len(n.Guests))
		for i, g := range n.Guests {
			names[i] = g.Name
		}
		fmt.Printf("nodes %s Ready: %s\n", strings.Join(names, ", "), n.Timings)
		fmt.Printf("kubectl: %s kubectl get pods -A    guest: %s exec 'ctr -n k8s.io containers ls'    down: make node-down\n", os.Args[0], os.Args[0])
		return 0, nil
	case "down":
		return exitCode(node.Down(ctx, *dir))
	case "kubectl", "host":
		n, err := node.Open(*dir)
		if err != nil {
			return 1, err
		}
		defer n.Close()
		var cmd *exec.Cmd
		switch {
		case command == "kubectl":
			cmd = n.Kubectl(ctx, rest...)
		case len(rest) == 0:
			return 2, errors.New("host needs a command")
		default:
			cmd = n.Command(ctx, rest[0], rest[1:]...)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return exitCode(cmd.Run())
	case "exec":
		n, err := node.Open(*dir)
		if err != nil {
			return 1, err
		}
		defer n.Close()
		i := slices.IndexFunc(n.Guests, func(g *node.Guest) bool { return g.Name == *guestName })
		if i < 0 {
			return 2, fmt.Errorf("no node %q", *guestName)
		}
		out, err := n.Guests[i].Exec(ctx, strings.Join(rest, " "))
		fmt.Print(out)
		var ee *node.ExitError
		if errors.As(err, &ee) {
			return ee.Code, nil
		}
		return exitCode(err)
	}
	return 2, fmt.Errorf("unknown command %q", command)
}

func exitCode(err error) (int, error) {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee):
		return ee.ExitCode(), nil
	default:
		return 1, err
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/logging"
	"github.com/switchyard-lb/switchyard/core/version"
	"github.com/switchyard-lb/switchyard/ipvs/tuning"
)

// DefaultConfigPath is where the DaemonSet mounts the config ConfigMap.
const DefaultConfigPath = "/etc/switchyard/config.yaml"

// flags are the daemon's command-line flags.
type flags struct {
	configPath       string
	kubeconfig       string
	hostnameOverride string
	verbosity        int
	logFormat        string
	version          bool
	setSysctls       bool
	profiling        bool
	cleanup          bool
	cleanupKubeProxy bool
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("switchyard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.configPath, "config", DefaultConfigPath, "path of the SwitchyardConfig file")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file to reach the API server with (default: in-cluster config)")
	fs.StringVar(&f.hostnameOverride, "hostname-override", "", "this node's name (default: $NODE_NAME, else the host name)")
	fs.IntVar(&f.verbosity, "v", 0, "log verbosity: 0 is info; higher shows more (4 shows debug)")
	fs.StringVar(&f.logFormat, "log-format", logging.FormatJSON, "log format: json or text")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.BoolVar(&f.profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics address")
	fs.BoolVar(&f.setSysctls, "set-sysctls", false, "set the kernel parameters the config's dataplane needs, then exit (needs a writable /proc/sys: the DaemonSet's privileged init container)")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove what Switchyard owns on this node (switchyard0, the nftables table inet switchyard, its IPVS services), then exit")
	fs.BoolVar(&f.cleanupKubeProxy, "cleanup-kube-proxy", false, "remove kube-proxy's leftovers on this node (kube-ipvs0, its IPVS services, KUBE-* iptables chains and ipsets, nftables tables ip/ip6 kube-proxy), then exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: switchyard [flags]\n\nSwitchyard node daemon: programs this node's dataplane for the cluster's Services.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return f, nil
}

// run is the whole daemon: it returns when ctx is done (nil) or when it
// cannot start or keep running (the reason).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if f.version {
		fmt.Fprintf(stdout, "switchyard %s\n", version.Version)
		return nil
	}
	log, err := logging.New(stderr, f.logFormat, f.verbosity)
	if err != nil {
		return err
	}
	if err := logging.RouteKlog(log, f.verbosity); err != nil {
		return err
	}
	if f.cleanup || f.cleanupKubeProxy {
		return cleanupNode(ctx, f.cleanup, f.cleanupKubeProxy, log)
	}
	if f.setSysctls {
		w, err := config.NewWatcher(f.configPath, configChecks()...) // read once
		if err != nil {
			return err
		}
		warnDeprecated(log, w)
		return setSysctls(w.Config(), tuning.RunningHost(), log)
	}
	watcher, err := config.NewWatcher(f.configPath, configChecks()...)
	if err != nil {
		return err
	}
	node, err := nodeName(f.hostnameOverride, os.Getenv("NODE_NAME"), os.Hostname)
	if err != nil {
		return err
	}
	restCfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = "switchyard/" + version.Version
	// Protobuf, as kube-proxy asks for: the initial lists and every
	// watch event decode several times faster than as JSON.
	restCfg.ContentType = runtime.ContentTypeProtobuf
	restCfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	log.Info("starting", "version", version.Version, "node", node, "config", f.configPath, "apiServer", restCfg.Host)
	return runDaemon(ctx, daemonConfig{
		Watcher:   watcher,
		Client:    client,
		NodeName:  node,
		Log:       log,
		Profiling: f.profiling,
	})
}

// nodeName picks this node's name as kube-proxy does: the override, else
// $NODE_NAME, else the host name; lower-cased.
func nodeName(override, env string, hostname func() (string, error)) (string, error) {
	name := strings.TrimSpace(override)
	if name == "" {
		name = strings.TrimSpace(env)
	}
	if name == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("node name: no --hostname-override or NODE_NAME, and %w", err)
		}
		name = strings.TrimSpace(h)
	}
	if name == "" {
		return "", errors.New("node name: set --hostname-override or NODE_NAME")
	}
	return strings.ToLower(name), nil
}

// restConfig loads kubeconfig, or the in-cluster config when it is "".
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config (use --kubeconfig outside a cluster): %w", err)
	}
	return c, nil
}

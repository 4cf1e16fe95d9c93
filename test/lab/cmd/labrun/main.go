// Command labrun runs a static Go test binary (or any static program) inside
// the kernel lab's VM and exits with its exit status:
//
//	labrun assets                      build the cached boot assets, print them
//	labrun run [flags] [--] BINARY ARGS...
//
// It is meant for `CGO_ENABLED=0 go test -exec "labrun run" PKG`: go test
// hands it the compiled test binary and its flags. A run without a verdict
// (timeout, guest panic, missing exit marker) exits 3 with the reason and
// the end of the kernel console on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-lb/switchyard/test/lab"
)

// exitNoVerdict is labrun's own failure: no exit status came back.
const exitNoVerdict = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: labrun assets|run [flags] [--] BINARY ARGS...")
		return 2
	}
	fs := flag.NewFlagSet("labrun "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg lab.Config
	var env multiFlag
	fs.StringVar(&cfg.CacheDir, "cache", "", "cache directory (default ${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}/lab)")
	fs.StringVar(&cfg.KernelRoot, "kernel", "", "unpacked kernel package (default: newest under the cache)")
	fs.StringVar(&cfg.Busybox, "busybox", "", "static busybox (default /bin/busybox)")
	mem := fs.Int("mem", 256, "guest memory in MiB")
	timeout := fs.Duration("timeout", 0, "whole-VM timeout (default: the binary's -test.timeout plus 1m, else 10m)")
	verbose := fs.Bool("v", false, "log timings to stderr")
	consoleFile := fs.String("console", "", "write the guest's kernel console log to this file")
	testdata := fs.String("testdata", "testdata", "directory copied to the guest's working directory as testdata/, if it exists (\"\" for none)")
	userNet := fs.Bool("usernet", false, "attach a NIC on qemu user networking (guest 10.0.2.15/24 to configure, host loopback at 10.0.2.2); loads lab.UserNetModules")
	fs.Var(&env, "env", "KEY=VALUE added to the guest environment (repeatable)")
	var extra, modules listFlag
	fs.Var(&extra, "extra", "host programs, libraries or directories copied to the same paths in the guest with their shared libraries, e.g. /usr/sbin/ipset,/usr/sbin/nft (comma-separated, repeatable)")
	fs.Var(&modules, "modules", "kernel modules loaded at boot on top of the default ones (comma-separated, repeatable)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *userNet || len(modules) > 0 {
		cfg.Modules = append([]string{}, lab.DefaultModules...)
		if *userNet {
			cfg.Modules = append(cfg.Modules, lab.UserNetModules...)
		}
		cfg.Modules = append(cfg.Modules, modules...)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	start := time.Now()
	assets, err := lab.EnsureAssets(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "labrun: %v\n", err)
		return exitNoVerdict
	}
	log.Info("assets ready", "kernel", assets.Kernel.Version, "elapsed", time.Since(start).Round(time.Millisecond))

	switch args[0] {
	case "assets":
		fmt.Fprintf(stdout, "kernel %s\nvmlinux %s\ninitramfs %s\n", assets.Kernel.Version, assets.Vmlinux, assets.Initramfs)
		return 0
	case "run":
	default:
		fmt.Fprintf(stderr, "labrun: unknown command %q\n", args[0])
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "labrun run: missing BINARY")
		return 2
	}
	job := lab.Job{
		Binary:   fs.Arg(0),
		Args:     fs.Args()[1:],
		Env:      env,
		MemoryMB: *mem,
		Timeout:  *timeout,
		Output:   stdout,
		UserNet:  *userNet,
		Extra:    extra,
	}
	if *testdata != "" {
		// go test -exec runs in the package directory: bring its testdata.
		if st, err := os.Stat(*testdata); err == nil && st.IsDir() {
			job.TestData = *testdata
		}
	}
	if *consoleFile != "" {
		f, err := os.Create(*consoleFile)
		if err != nil {
			fmt.Fprintf(stderr, "labrun: %v\n", err)
			return 2
		}
		defer f.Close()
		job.Console = f
	}
	if job.Timeout == 0 {
		job.Timeout = timeoutFor(job.Args)
	}
	res, err := lab.Run(ctx, assets, job)
	if err != nil {
		fmt.Fprintf(stderr, "labrun: %s: %v\n", job.Binary, err)
		return exitNoVerdict
	}
	log.Info("guest done", "exit", res.ExitCode, "elapsed", res.Elapsed.Round(time.Millisecond))
	return res.ExitCode
}

// timeoutFor gives the VM a minute more than the test binary's own
// -test.timeout, so that the binary's timeout panic, with its goroutine
// dump, is what the user sees.
func timeoutFor(args []string) time.Duration {
	for _, a := range args {
		v, ok := strings.CutPrefix(a, "-test.timeout=")
		if !ok {
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			break
		}
		return d + time.Minute
	}
	return lab.DefaultTimeout
}

type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, ",") }

func (m *multiFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return errors.New("want KEY=VALUE")
	}
	*m = append(*m, v)
	return nil
}

// listFlag collects comma-separated values over repeated flags.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}

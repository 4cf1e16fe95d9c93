package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/test/node"
)

// E2E is how e2e.test runs.
type E2E struct {
	Bin     string // e2e.test (test/tools/kube-binaries.sh --e2e)
	Kubectl string // the kubectl specs run (kubectl exec into pods)
	Focus   string // --ginkgo.focus
	Skip    string // --ginkgo.skip, may be empty
	// Timeout is e2e.test's own --ginkgo.timeout for the whole run.
	Timeout time.Duration
}

// RunInfo is what a stored run was: its selection, when, how long, the
// machine's load, and e2e.test's exit status (non-zero when a spec
// failed).
type RunInfo struct {
	Proxy      string
	Focus      string
	Skip       string
	Start      time.Time
	Wall       time.Duration
	LoadBefore string // /proc/loadavg's first three fields
	LoadAfter  string
	ExitCode   int
}

// Store keeps each proxy's last run under Dir/PROXY: e2e.test's JUnit
// report (junit_01.xml), its log (e2e.log) and run.json (RunInfo).
type Store struct{ Dir string }

func (s Store) dir(proxy string) string { return filepath.Join(s.Dir, proxy) }

// Load reads every stored run.
func (s Store) Load() (map[string][]Result, map[string]RunInfo, error) {
	results, infos := map[string][]Result{}, map[string]RunInfo{}
	for _, c := range Columns {
		f, err := os.Open(filepath.Join(s.dir(c.Proxy), "junit_01.xml"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("conformance: %w", err)
		}
		rs, err := ParseJUnit(f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%w (%s)", err, c.Proxy)
		}
		results[c.Proxy] = rs
		b, err := os.ReadFile(filepath.Join(s.dir(c.Proxy), "run.json"))
		if err != nil {
			return nil, nil, fmt.Errorf("conformance: %w", err)
		}
		var info RunInfo
		if err := json.Unmarshal(b, &info); err != nil {
			return nil, nil, fmt.Errorf("conformance: %s run.json: %w", c.Proxy, err)
		}
		infos[c.Proxy] = info
	}
	return results, infos, nil
}

// Run switches the node to p (every other proxy stopped first through
// its cleanup path, in others), runs e2e.test there with its report in
// the store, then stops p again. A spec failing is not an error; e2e.test
// ending without a report is.
func Run(ctx context.Context, n *node.Node, p Proxy, others []Proxy, e E2E, s Store, log *slog.Logger) (RunInfo, error) {
	for _, o := range others {
		if err := bounded(ctx, 20*time.Minute, func(ctx context.Context) error { return o.Stop(ctx, n) }); err != nil {
			return RunInfo{}, fmt.Errorf("conformance: stop %s: %w", o.Name(), err)
		}
	}
	began := time.Now()
	if err := bounded(ctx, 20*time.Minute, func(ctx context.Context) error { return p.Start(ctx, n) }); err != nil {
		return RunInfo{}, fmt.Errorf("conformance: start %s: %w", p.Name(), err)
	}
	log.Info("proxy serving", "proxy", p.Name(), "elapsed", time.Since(began).Round(100*time.Millisecond))

	dir := s.dir(p.Name())
	if err := os.RemoveAll(dir); err != nil {
		return RunInfo{}, fmt.Errorf("conformance: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return RunInfo{}, fmt.Errorf("conformance: %w", err)
	}
	info := RunInfo{Proxy: p.Name(), Focus: e.Focus, Skip: e.Skip, Start: time.Now(), LoadBefore: loadAvg()}
	logFile, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return RunInfo{}, fmt.Errorf("conformance: %w", err)
	}
	cmd := n.Command(ctx, e.Bin, e2eArgs(n, e, dir)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Interrupted (make conformance stopped with ^C), e2e.test gets
	// SIGINT, not SIGKILL: ginkgo then ends the running spec with its
	// cleanup, skips the rest and still writes the JUnit report, so a
	// chunk stopped by hand keeps the results it has.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Minute
	log.Info("e2e.test running", "proxy", p.Name(), "log", logFile.Name())
	runErr := cmd.Run()
	logFile.Close()
	info.Wall, info.LoadAfter = time.Since(info.Start).Round(time.Second), loadAvg()
	var ee *exec.ExitError
	switch {
	case errors.As(runErr, &ee):
		info.ExitCode = ee.ExitCode()
	case runErr != nil:
		info.ExitCode = -1
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return info, fmt.Errorf("conformance: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), b, 0o644); err != nil {
		return info, fmt.Errorf("conformance: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "junit_01.xml")); err != nil {
		return info, fmt.Errorf("conformance: e2e.test (exit %d) wrote no report, see %s: %w", info.ExitCode, logFile.Name(), err)
	}
	if runErr != nil && ee == nil {
		return info, fmt.Errorf("conformance: e2e.test (its report kept): %w", runErr)
	}
	log.Info("e2e.test done", "proxy", p.Name(), "wall", info.Wall, "exit", info.ExitCode)
	if err := bounded(ctx, 20*time.Minute, func(ctx context.Context) error { return p.Stop(ctx, n) }); err != nil {
		return info, fmt.Errorf("conformance: stop %s: %w", p.Name(), err)
	}
	return info, nil
}

// e2eArgs runs the selection against the node (its admin kubeconfig,
// every guest a Node), writing the JUnit report to dir; no log dumps (the node's logs
// stay in the guest), no colour in the log file.
func e2eArgs(n *node.Node, e E2E, dir string) []string {
	args := []string{
		"--kubeconfig=" + n.Kubeconfig,
		"--kubectl-path=" + e.Kubectl,
		"--provider=skeleton",
		"--report-dir=" + dir,
		"--dump-logs-on-failure=false",
		"--disable-log-dump",
		"--ginkgo.focus=" + e.Focus,
		"--ginkgo.timeout=" + e.Timeout.String(),
		"--ginkgo.no-color",
		"--ginkgo.v",
	}
	if e.Skip != "" {
		args = append(args, "--ginkgo.skip="+e.Skip)
	}
	return args
}

// bounded runs f with a deadline d.
func bounded(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

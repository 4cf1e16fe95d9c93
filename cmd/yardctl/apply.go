package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/switchyard-lb/switchyard/core/version"
	"github.com/switchyard-lb/switchyard/plugins/registry"
)

// DefaultWatchInterval is how often apply --watch looks at its files.
const DefaultWatchInterval = time.Second

// apiTimeout bounds one request to the API server.
const apiTimeout = 30 * time.Second

var policyApply = &command{
	name:  "policy apply",
	usage: " FILE|SOURCE --name N [--params P.json] [--scenario S.yaml|DIR] [--kubeconfig F] [--watch]",
	long: "Checks FILE exactly as pack does (it must load, decide the built-in sample scenario or\n" +
		"meet the expectations of --scenario within the deadline, with the parameters it packs, and\n" +
		"--name must be a valid ConfigMap name), then creates or updates the policy ConfigMap in the\n" +
		"cluster: its label, module (policy.wasm, or policy.wasm.gz over --gzip-over bytes), sha256\n" +
		"pin and params.json become what pack prints (params.json is removed without --params);\n" +
		"other keys, labels and annotations are kept. It prints what changed and the new\n" +
		"resourceVersion. The daemons load the new version within seconds and re-evaluate the\n" +
		"Services that use it; `yardctl state` on a node shows the version each Service runs.\n" +
		"A version that fails to load there leaves the last good one running, and the Service\n" +
		"says why (its PolicyReady condition, PolicyFailed Events, yardctl state).\n" +
		"Given a policy's SOURCE instead of a module (a Go package directory, a .rs or .ts file, or\n" +
		"a directory holding one), apply first builds it exactly as `yardctl policy build` does\n" +
		"(--lang, --out, --strip, --sdk), then checks and applies the module it built.\n" +
		"The cluster is the one of --kubeconfig, else KUBECONFIG or ~/.kube/config, else the\n" +
		"in-cluster config.\n" +
		"--watch keeps running, the edit loop: whenever the source (every .go, go.mod, go.sum, .rs\n" +
		"and .ts file under its directory, node_modules and hidden directories aside) or the\n" +
		"module FILE, or the --params or --scenario files, change, it builds again (a source),\n" +
		"runs the checks (the scenarios' expectations) and applies only when they pass, printing\n" +
		"each time what it built, checked and changed; a build or check that fails is reported\n" +
		"and nothing is applied until the next change. Ctrl-C stops it.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		opts := packFlags(fs)
		bopts := buildFlags(fs)
		kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; default KUBECONFIG, ~/.kube/config, else the in-cluster config")
		kubecontext := fs.String("context", "", "kubeconfig context to use; default its current context")
		watch := fs.Bool("watch", false, "keep running: build (a source), check and apply again whenever the source or FILE, --params or --scenario change")
		interval := fs.Duration("interval", DefaultWatchInterval, "with --watch, how often to look at the files")
		return func(ctx context.Context, s ioStreams, args []string) error {
			path, err := fileArg(*output, args)
			if err != nil {
				return err
			}
			if err := opts.check(); err != nil {
				return err
			}
			if *interval <= 0 {
				return usageError{fmt.Sprintf("--interval %v: want a positive duration", *interval)}
			}
			a := &applier{path: path, opts: opts, json: *output == "json", out: s.out}
			switch {
			case isSource(path):
				if a.build, err = newBuilder(path, bopts, s.err); err != nil {
					return err
				}
			case *bopts != buildOptions{}:
				return usageError{fmt.Sprintf("--lang, --out, --strip and --sdk build a policy's source; %s is a module", path)}
			}
			if a.client, err = kubeClient(*kubeconfig, *kubecontext); err != nil {
				return err
			}
			if !*watch {
				return a.once(ctx)
			}
			return a.watch(ctx, s.err, *interval)
		}
	},
}

// kubeClient connects to the cluster of kubeconfig (a file; "" means
// KUBECONFIG, then ~/.kube/config, then the in-cluster config) and its
// context kubecontext ("" means the current one).
func kubeClient(kubeconfig, kubecontext string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubecontext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster to apply to: %w (give --kubeconfig, set KUBECONFIG, or run in a cluster)", err)
	}
	cfg.UserAgent = "yardctl/" + version.Version
	cfg.Timeout = apiTimeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	return client, nil
}

// applier builds (a source), checks and applies one policy.
type applier struct {
	client kubernetes.Interface
	// path is the module, or the source when build is set.
	path  string
	build *builder
	opts  *packOptions
	json  bool
	out   io.Writer
}

// applyResult is what one apply did; -o json prints it.
type applyResult struct {
	// Built is the module built from the source, when given one.
	Built *builtModule `json:"built,omitempty"`
	// Checked says what the module was checked with before applying.
	Checked   string `json:"checked,omitempty"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Action is created, updated or unchanged.
	Action          string `json:"action"`
	SHA256          string `json:"sha256"`
	PreviousSHA256  string `json:"previousSha256,omitempty"`
	ResourceVersion string `json:"resourceVersion"`
	// Changes are the changes made, in words.
	Changes []string `json:"changes,omitempty"`
}

// builtModule is a module apply built.
type builtModule struct {
	Source   string `json:"source"`
	Language string `json:"language"`
	Module   string `json:"module"`
	Size     int64  `json:"size"`
}

// once builds the source (when given one), checks and applies the
// module, and prints the result.
func (a *applier) once(ctx context.Context) error {
	module := a.path
	var built *builtModule
	if b := a.build; b != nil {
		size, err := b.build(ctx)
		if err != nil {
			return fmt.Errorf("not applied: %w", err)
		}
		module, built = b.out, &builtModule{Source: b.src, Language: b.lang, Module: b.outName, Size: size}
	}
	cm, err := packFile(ctx, module, a.opts)
	if err != nil {
		return fmt.Errorf("not applied: %w", err)
	}
	res, err := applyConfigMap(ctx, a.client, cm)
	if err != nil {
		return err
	}
	res.Built, res.Checked = built, checkedWith(a.opts)
	if a.json {
		return writeJSON(a.out, res)
	}
	return printApply(a.out, res)
}

// checkedWith says what packFile checked a module with.
func checkedWith(o *packOptions) string {
	what := "the built-in sample scenario"
	if o.scenario != "" {
		what = "the expectations of " + o.scenario
	}
	if o.params != "" {
		what += ", with --params"
	}
	return what
}

// watch applies the policy, then again whenever its files change, until
// ctx is done. A failed build, check or apply is reported on errw (as
// JSON on out with -o json) and waits for the next change.
func (a *applier) watch(ctx context.Context, errw io.Writer, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var tried, seen [sha256.Size]byte
	first := true
	for {
		fp := a.fingerprint()
		// Act on a change once it has held for one interval, so that a
		// file still being written is not read half-done (the first
		// apply does not wait).
		if first || (fp == seen && fp != tried) {
			first, tried = false, fp
			if err := a.once(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				a.report(errw, err)
			}
		}
		seen = fp
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// report prints a failed attempt of watch, which goes on.
func (a *applier) report(errw io.Writer, err error) {
	msg := strings.TrimRight(err.Error(), "\n")
	if a.json {
		_ = writeJSON(a.out, struct {
			Error string `json:"error"`
		}{msg})
		return
	}
	if !keepsLines(err) {
		msg = oneLine(msg)
	}
	fmt.Fprintf(errw, "yardctl: %s (waiting for %s to change)\n", msg, filepath.Base(a.path))
}

// fingerprint hashes the contents of the files an apply reads: the
// source files (sourceFiles) or the module, the --params file and the
// --scenario file or directory. A file that cannot be read hashes as its
// error.
func (a *applier) fingerprint() [sha256.Size]byte {
	h := sha256.New()
	add := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			b = []byte(err.Error())
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
	}
	if a.build != nil {
		files, err := sourceFiles(a.build.dir())
		if err != nil {
			fmt.Fprintln(h, err)
		}
		for _, f := range files {
			add(f)
		}
	} else {
		add(a.path)
	}
	if p := a.opts.params; p != "" && !strings.HasPrefix(strings.TrimSpace(p), "{") {
		add(p)
	}
	if sc := a.opts.scenario; sc != "" {
		if entries, err := os.ReadDir(sc); err == nil {
			for _, e := range entries {
				add(filepath.Join(sc, e.Name()))
			}
		} else {
			add(sc)
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// maxSourceFiles bounds what sourceFiles returns: a policy is a few files,
// and apply --watch run from a home directory must not hash it all.
const maxSourceFiles = 1000

// sourceFiles lists the policy source files under dir, in a stable order:
// .go, go.mod, go.sum, .rs and .ts files, outside node_modules and hidden
// directories, at most maxSourceFiles of them.
func sourceFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			if p != dir && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		case len(out) == maxSourceFiles:
			return fs.SkipAll
		}
		switch n := d.Name(); {
		case n == "go.mod", n == "go.sum", filepath.Ext(n) == ".go", filepath.Ext(n) == ".rs", filepath.Ext(n) == ".ts":
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("list the policy's source files: %w", err)
	}
	return out, nil
}

// applyConfigMap creates want, or updates the ConfigMap of its name so
// that its policy keys and label are want's, keeping everything else.
func applyConfigMap(ctx context.Context, client kubernetes.Interface, want *corev1.ConfigMap) (*applyResult, error) {
	cms := client.CoreV1().ConfigMaps(want.Namespace)
	res := &applyResult{Namespace: want.Namespace, Name: want.Name, SHA256: want.Data[registry.KeyPin]}
	where := want.Namespace + "/" + want.Name
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		res.Changes, res.PreviousSHA256 = nil, ""
		cur, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			created, err := cms.Create(ctx, want, metav1.CreateOptions{FieldManager: "yardctl"})
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("create ConfigMap %s: %w (is Switchyard deployed? its namespace %s does not exist)", where, err, want.Namespace)
			}
			if err != nil {
				return fmt.Errorf("create ConfigMap %s: %w", where, err)
			}
			res.Action, res.ResourceVersion = "created", created.ResourceVersion
			return nil
		}
		if err != nil {
			return fmt.Errorf("get ConfigMap %s: %w", where, err)
		}
		next := mergePolicy(cur, want)
		if old, _, err := registry.Decode(cur, registry.DefaultMaxModuleSize); err == nil {
			res.PreviousSHA256 = registry.Digest(old)
		}
		res.Changes = policyChanges(cur, next, res.PreviousSHA256)
		if len(res.Changes) == 0 {
			res.Action, res.ResourceVersion = "unchanged", cur.ResourceVersion
			return nil
		}
		updated, err := cms.Update(ctx, next, metav1.UpdateOptions{FieldManager: "yardctl"})
		if err != nil {
			return fmt.Errorf("update ConfigMap %s: %w", where, err)
		}
		res.Action, res.ResourceVersion = "updated", updated.ResourceVersion
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// mergePolicy returns cur with want's label and policy keys: the module
// (under the one key want uses), the pin and params.json (removed when
// want has none). A module misplaced under data is removed.
func mergePolicy(cur, want *corev1.ConfigMap) *corev1.ConfigMap {
	next := cur.DeepCopy()
	if next.Labels == nil {
		next.Labels = map[string]string{}
	}
	next.Labels[registry.Label] = "true"
	if next.Data == nil {
		next.Data = map[string]string{}
	}
	if next.BinaryData == nil {
		next.BinaryData = map[string][]byte{}
	}
	for _, k := range []string{registry.KeyModule, registry.KeyModuleGzip} {
		delete(next.Data, k)
		delete(next.BinaryData, k)
		if b, ok := want.BinaryData[k]; ok {
			next.BinaryData[k] = b
		}
	}
	for _, k := range []string{registry.KeyPin, registry.KeyParams} {
		delete(next.Data, k)
		if v, ok := want.Data[k]; ok {
			next.Data[k] = v
		}
	}
	return next
}

// policyChanges says in words how next differs from cur in what
// mergePolicy sets; curDigest is the digest of cur's module, "" when it
// does not decode.
func policyChanges(cur, next *corev1.ConfigMap, curDigest string) []string {
	var out []string
	if cur.Labels[registry.Label] != "true" {
		out = append(out, fmt.Sprintf("label %s=true added", registry.Label))
	}
	moduleKey := func(cm *corev1.ConfigMap) (string, []byte) {
		for _, k := range []string{registry.KeyModule, registry.KeyModuleGzip} {
			if b, ok := cm.BinaryData[k]; ok {
				return k, b
			}
		}
		return "", nil
	}
	ck, cb := moduleKey(cur)
	nk, nb := moduleKey(next)
	oldDigest := "none"
	switch {
	case curDigest != "":
		oldDigest = registry.ShortDigest(curDigest)
	case ck != "":
		oldDigest = "unreadable"
	}
	newDigest := registry.ShortDigest(next.Data[registry.KeyPin])
	switch {
	case oldDigest != newDigest:
		out = append(out, fmt.Sprintf("module sha256 %s -> %s", oldDigest, newDigest))
	case ck != nk || !bytes.Equal(cb, nb):
		out = append(out, fmt.Sprintf("module re-encoded as %s", nk))
	}
	for _, k := range slices.Sorted(maps.Keys(cur.Data)) {
		if k == registry.KeyModule || k == registry.KeyModuleGzip {
			out = append(out, fmt.Sprintf("data %s removed (a module belongs under binaryData)", k))
		}
	}
	if c, n := cur.Data[registry.KeyParams], next.Data[registry.KeyParams]; c != n {
		switch {
		case c == "":
			out = append(out, "params.json set to "+n)
		case n == "":
			out = append(out, "params.json removed (was "+c+")")
		default:
			out = append(out, "params.json "+c+" -> "+n)
		}
	}
	if c, n := cur.Data[registry.KeyPin], next.Data[registry.KeyPin]; c != n && oldDigest == registry.ShortDigest(n) {
		out = append(out, "sha256 pin set")
	}
	return out
}

func printApply(w io.Writer, r *applyResult) error {
	if b := r.Built; b != nil {
		fmt.Fprintf(w, "built %s (%s): %s, %d bytes\n", b.Source, b.Language, b.Module, b.Size)
	}
	if r.Checked != "" {
		fmt.Fprintf(w, "checked with %s: passed\n", r.Checked)
	}
	line := fmt.Sprintf("configmap %s/%s %s: sha256 %s, resourceVersion %s", r.Namespace, r.Name, r.Action, registry.ShortDigest(r.SHA256), r.ResourceVersion)
	if len(r.Changes) > 0 {
		line += "\n  " + strings.Join(r.Changes, "\n  ")
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

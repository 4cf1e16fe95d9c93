package lb

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	// defaultNamespace is the daemon's namespace when neither
	// POD_NAMESPACE nor the service account's namespace file says.
	defaultNamespace = "switchyard-system"
	// namespaceFile is where Kubernetes mounts the pod's namespace.
	namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	// secretResync re-delivers the watched Secrets, so a password that
	// failed to apply is retried.
	secretResync = 5 * time.Minute
)

// DaemonNamespace is the namespace the daemon runs in, where it reads
// Secrets: env (the daemon's $POD_NAMESPACE), else the in-cluster
// namespace file, else switchyard-system.
func DaemonNamespace(env string, readFile func(string) ([]byte, error)) string {
	if ns := strings.TrimSpace(env); ns != "" {
		return ns
	}
	if b, err := readFile(namespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return defaultNamespace
}

// Secrets reads and follows Secrets of the daemon's namespace: one watch
// per followed name (a field selector, so nothing else of the namespace
// is cached). Follows registered before Run start with it.
type Secrets struct {
	client kubernetes.Interface
	ns     string
	log    *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // set by run; nil before
	wg      *sync.WaitGroup
	pending []func()
}

func newSecrets(client kubernetes.Interface, ns string, log *slog.Logger) *Secrets {
	return &Secrets{client: client, ns: ns, log: log}
}

// Namespace is the daemon's namespace.
func (s *Secrets) Namespace() string { return s.ns }

// Get reads the Secret name; nil without error when there is none.
func (s *Secrets) Get(ctx context.Context, name string) (*corev1.Secret, error) {
	sec, err := s.client.CoreV1().Secrets(s.ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read Secret %s/%s: %w", s.ns, name, err)
	}
	return sec, nil
}

// follow calls on with the Secret name after every change and resync,
// and with nil once it is deleted, from the watch's goroutine, until the
// context of run is done.
func (s *Secrets) follow(name string, on func(*corev1.Secret)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := func() { watchSecret(s.ctx, s.wg, s.client, s.ns, name, s.log, on) }
	if s.ctx == nil {
		s.pending = append(s.pending, start)
		return
	}
	if s.ctx.Err() == nil {
		start()
	}
}

// run starts the follows registered so far, and those registered later
// at once; they stop when ctx is done.
func (s *Secrets) run(ctx context.Context, wg *sync.WaitGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.wg = ctx, wg
	for _, start := range s.pending {
		start()
	}
	s.pending = nil
}

// watchSecret watches the Secret name in ns (a field selector on the
// name, so nothing else of the namespace is cached) until ctx is done,
// calling on with it after every change and resync, and with nil once it
// is deleted. on runs on the informer's goroutine.
func watchSecret(ctx context.Context, wg *sync.WaitGroup, client kubernetes.Interface, ns, name string, log *slog.Logger, on func(*corev1.Secret)) {
	secrets := client.CoreV1().Secrets(ns)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return secrets.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Secret{}, secretResync, cache.Indexers{})
	got := func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok && s.Name == name {
			on(s)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    got,
		UpdateFunc: func(_, obj any) { got(obj) },
		DeleteFunc: func(any) { on(nil) },
	})
	if err != nil { // only after the informer stopped: not here
		log.Error("watch Secret", "secret", ns+"/"+name, "err", err)
		return
	}
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		log.Warn("watching Secret", "secret", ns+"/"+name, "err", err)
	})
	wg.Go(func() { inf.RunWithContext(ctx) })
}

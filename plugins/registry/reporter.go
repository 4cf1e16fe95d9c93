package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// ConditionPolicyReady is the Service condition the Reporter writes.
const ConditionPolicyReady = "switchyard.dev/PolicyReady"

// Defaults of ReporterOptions.
const (
	DefaultConditionQPS   = 5
	DefaultConditionBurst = 10
	DefaultRetryInterval  = 5 * time.Second
)

// ReporterOptions configure a Reporter; zero values take the defaults.
type ReporterOptions struct {
	// NodeName prefixes condition messages: each node evaluates for
	// itself, and the last writer's view is what the Service shows.
	NodeName string
	// QPS and Burst bound the status patches.
	QPS   float32
	Burst int
	// RetryInterval is the wait before a failed patch is retried.
	RetryInterval time.Duration
}

// Reporter implements plugin.PolicyReporter over the API server:
// Events through an EventRecorder, and the PolicyReady condition through
// status patches from its own goroutine (Run), rate limited, coalesced per
// Service, retried on failure.
type Reporter struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     ReporterOptions
	log      *slog.Logger
	limiter  flowcontrol.RateLimiter
	wake     chan struct{}
	now      func() time.Time

	mu      sync.Mutex
	pending map[model.ServiceKey]condition
}

type condition struct {
	ready           bool
	reason, message string
}

var _ plugin.PolicyReporter = (*Reporter)(nil)

// NewReporter returns a Reporter; recorder may be nil (no Events).
func NewReporter(client kubernetes.Interface, recorder record.EventRecorder, opts ReporterOptions, log *slog.Logger) *Reporter {
	if opts.QPS <= 0 {
		opts.QPS = DefaultConditionQPS
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultConditionBurst
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reporter{
		client: client, recorder: recorder, opts: opts, log: log,
		limiter: flowcontrol.NewTokenBucketRateLimiter(opts.QPS, opts.Burst),
		wake:    make(chan struct{}, 1),
		now:     time.Now,
		pending: make(map[model.ServiceKey]condition),
	}
}

func serviceRef(svc model.ServiceKey) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}
}

// PolicyEvent records a warning Event on the Service.
func (r *Reporter) PolicyEvent(svc model.ServiceKey, reason, message string) {
	if r.recorder != nil {
		r.recorder.Event(serviceRef(svc), corev1.EventTypeWarning, reason, message)
	}
}

// PolicyCondition queues the Service's condition for Run to write; a
// later call for the same Service replaces a queued one. A gone Service
// (ready without reason) drops what is queued.
func (r *Reporter) PolicyCondition(svc model.ServiceKey, ready bool, reason, message string) {
	r.mu.Lock()
	if ready && reason == "" {
		delete(r.pending, svc)
	} else {
		r.pending[svc] = condition{ready, reason, message}
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run writes queued conditions until ctx is done.
func (r *Reporter) Run(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-retry:
		}
		retry = nil
		r.mu.Lock()
		pending := r.pending
		r.pending = make(map[model.ServiceKey]condition)
		r.mu.Unlock()
		var failed bool
		for _, k := range slices.SortedFunc(maps.Keys(pending), model.ServiceKey.Compare) {
			if err := r.limiter.Wait(ctx); err != nil {
				return
			}
			c := pending[k]
			err := r.patch(ctx, k, c)
			switch {
			case err == nil, apierrors.IsNotFound(err):
			default:
				r.log.Warn("write Service condition", "service", k.String(), "err", err)
				r.mu.Lock()
				if _, newer := r.pending[k]; !newer {
					r.pending[k] = c
				}
				r.mu.Unlock()
				failed = true
			}
		}
		if failed {
			retry = time.After(r.opts.RetryInterval)
		}
	}
}

// patch merges the condition into the Service's status.conditions (a
// list map keyed by type, so other conditions stay).
func (r *Reporter) patch(ctx context.Context, k model.ServiceKey, c condition) error {
	status := metav1.ConditionFalse
	if c.ready {
		status = metav1.ConditionTrue
	}
	msg := c.message
	if r.opts.NodeName != "" {
		msg = "node " + r.opts.NodeName + ": " + msg
	}
	if len(msg) > 32768 {
		msg = msg[:32768]
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []metav1.Condition{{
		Type: ConditionPolicyReady, Status: status, Reason: c.reason, Message: msg,
		LastTransitionTime: metav1.NewTime(r.now().Truncate(time.Second)),
	}}}})
	if err != nil {
		return fmt.Errorf("encode condition: %w", err)
	}
	_, err = r.client.CoreV1().Services(k.Namespace).Patch(ctx, k.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "switchyard"}, "status")
	if err != nil {
		return fmt.Errorf("patch status of Service %s: %w", k, err)
	}
	return nil
}

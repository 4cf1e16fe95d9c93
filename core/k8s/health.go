package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Resources watched, as RBAC names them, in the order Healthy reports
// their failures.
const (
	resourceServices       = "services"
	resourceEndpointSlices = "endpointslices.discovery.k8s.io"
	resourceNodes          = "nodes"
)

// watchKeySeparator separates a resource from the suffix that tells two
// watches of it apart (the Service watches), so that one's success does
// not clear the other's failure; failures name the resource alone.
const watchKeySeparator = "#"

// resourceServicesNamed is the health key of the second Service watch.
const resourceServicesNamed = resourceServices + watchKeySeparator + "named"

var resources = []string{resourceServices, resourceServicesNamed, resourceEndpointSlices, resourceNodes}

// health records the last list or watch failure of each resource until a
// later list or watch of it succeeds.
type health struct {
	log *slog.Logger

	mu   sync.Mutex
	errs map[string]error
}

func newHealth(log *slog.Logger) *health {
	return &health{log: log, errs: make(map[string]error)}
}

// observe records the outcome of a list or watch call: nil clears the
// resource's failure.
func (h *health) observe(key, verb string, err error) {
	if err != nil && benign(err) {
		return
	}
	resource, _, _ := strings.Cut(key, watchKeySeparator)
	h.mu.Lock()
	prev := h.errs[key]
	if err == nil {
		delete(h.errs, key)
	} else {
		err = describe(resource, verb, err)
		h.errs[key] = err
	}
	h.mu.Unlock()

	switch {
	case err != nil && (prev == nil || prev.Error() != err.Error()):
		h.log.Warn("Kubernetes API request failed", "resource", resource, "err", err)
	case err == nil && prev != nil:
		h.log.Info("Kubernetes API request recovered", "resource", resource)
	}
}

// watchFailed records a failure the reflector reports (a watch stream
// that broke, a list it gave up on), unless the failing call itself was
// already recorded.
func (h *health) watchFailed(key string, err error) {
	h.mu.Lock()
	recorded := h.errs[key] != nil
	h.mu.Unlock()
	if !recorded {
		h.observe(key, "list or watch", err)
	}
}

// err returns the failure of the first failing resource, nil if none.
func (h *health) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range resources {
		if err := h.errs[r]; err != nil {
			return err
		}
	}
	return nil
}

// benign reports the errors that are part of a watch's normal life: a
// closed stream (client-go re-watches) or an expired resource version
// (it re-lists), and our own shutdown.
func benign(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.Canceled) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// forbiddenUser extracts the user and verb of the API server's RBAC
// denial message: `... is forbidden: User "alice" cannot list resource ...`.
var forbiddenUser = regexp.MustCompile(`User "([^"]*)" cannot (\S+) resource`)

// describe turns a list or watch failure into an error that says what
// failed and, for authorization failures, what to do about it.
func describe(resource, verb string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		user := "(unknown)"
		if m := forbiddenUser.FindStringSubmatch(err.Error()); m != nil {
			user, verb = fmt.Sprintf("%q", m[1]), m[2]
		}
		return fmt.Errorf("cannot %s %s: forbidden for user %s: grant it with the ClusterRole in deploy/: %w",
			verb, resource, user, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("cannot %s %s: the API server rejected our credentials: %w", verb, resource, err)
	}
	return fmt.Errorf("cannot %s %s: %w", verb, resource, err)
}

package plugin

import (
	"context"
	"errors"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Policies resolves the balancing policy of a Service; plugins/registry
// implements it. Its methods are called from the control loop's
// goroutine only.
type Policies interface {
	// HasSynced reports whether every policy known at start has been
	// loaded (or has failed to), so the first evaluations do not fall
	// back only because a module is still compiling. Before, Resolve
	// fails with ErrPolicyLoading for a policy not tried yet.
	HasSynced() bool
	// Resolve returns the policy svc uses: its name (for metrics, Events
	// and Changed; set even when err is not nil), the policy and the
	// parameters to pass it. err says why the policy cannot be used;
	// it wraps ErrNoPolicy when the policy does not exist. When the
	// policy's newest version cannot be used but an earlier one could,
	// Resolve returns that earlier one (p and params) with err saying
	// why: the loop balances with it and reports err.
	Resolve(svc *model.Service) (name string, p Policy, params []byte, err error)
	// Changed returns the names of the policies that changed (loaded,
	// reloaded, deleted, or became or stopped being the default) since
	// the previous call.
	Changed() []string
}

// PolicyVersion says which version of its code a policy runs, for the
// loop's /debug/state.
type PolicyVersion struct {
	// Digest is the lowercase hex sha256 of the policy's module.
	Digest string
	// Revision names where that version was delivered from; the loop
	// only shows it (plugins/registry: the resourceVersion of the policy
	// ConfigMap it was loaded from).
	Revision string
}

// Versioned is implemented by policies that know their version
// (plugins/registry's ConfigMap policies; built-in ones have none).
type Versioned interface {
	PolicyVersion() PolicyVersion
}

// StatsBlind is implemented by policies whose decisions never depend on
// the live statistics in their input (the built-in ones). A statistics
// tick does not re-evaluate the Services using them, and when every
// Service uses one, it does not read the dataplane's statistics at all:
// with thousands of Services that read is one netlink dump per virtual
// service.
type StatsBlind interface {
	IgnoresStats() bool
}

// Builtin is implemented by the daemon's own policies (plugins/builtin):
// Go of a small, known cost, which no deadline interrupts. Such a
// policy's result stands when it returns after the evaluation deadline:
// on a busy node (a start, a WebAssembly module compiling beside it on
// one CPU) that is the evaluating goroutine waiting for a CPU, not a
// runaway policy, and failing it would report a fallback to equal
// weights the user did nothing to cause. The deadline bounds every other
// policy.
type Builtin interface {
	Builtin() bool
}

// PolicyReporter tells the user about a Service's policy: the daemon
// records Events and writes the Service's switchyard.dev/PolicyReady
// condition (plugins/registry.Reporter). Calls are made from the control
// loop's goroutine and must not block.
type PolicyReporter interface {
	// PolicyEvent records a warning Event on the Service; reason is one
	// of the ReasonPolicy* values.
	PolicyEvent(svc model.ServiceKey, reason, message string)
	// PolicyCondition reports the Service's PolicyReady condition. The
	// loop calls it when the condition changes, and once with ready and
	// an empty reason when the Service is gone.
	PolicyCondition(svc model.ServiceKey, ready bool, reason, message string)
}

// Event reasons and condition reasons a PolicyReporter receives.
const (
	// ReasonPolicyFailed: the Service's policy could not be loaded or
	// evaluated (warning Event).
	ReasonPolicyFailed = "PolicyFailed"
	// ReasonPolicyFallback: the Service is balanced by a fallback (the
	// policy's last good result, else uniform weights) (warning Event).
	ReasonPolicyFallback = "PolicyFallback"
	// ReasonPolicyEvaluated is the reason of a True PolicyReady condition.
	ReasonPolicyEvaluated = "Evaluated"
)

// Failure reasons of a policy, as FailureReason names them: the values
// of the reason label of the policy failure metric.
const (
	FailureLoad          = "load"
	FailureDeadline      = "deadline"
	FailureTrap          = "trap"
	FailureDeclined      = "declined"
	FailureInvalidOutput = "invalid_output"
	FailureError         = "error"
)

// Errors a Policy's Evaluate wraps to say why it failed (plugins/wasm's
// errors are these or wrap them); FailureReason reads them.
var (
	// ErrNoPolicy, wrapped by a Resolve error, says the named policy
	// does not exist (for example its ConfigMap was deleted): the
	// Service then falls back to uniform weights at once rather than to
	// its last good result, which came from the policy that is gone.
	ErrNoPolicy = errors.New("no such policy")
	// ErrPolicyLoading, wrapped by a Resolve error before HasSynced,
	// says the policy has not been tried yet (its module may still be
	// compiling): the loop holds the Service back, neither falling back
	// nor reporting, until it resolves otherwise.
	ErrPolicyLoading = errors.New("policy still loading")
	// ErrPolicyUnusable: the policy cannot run at all (not loaded, or
	// closed).
	ErrPolicyUnusable = errors.New("policy unusable")
	// ErrPolicyDeadline: the policy ran past its deadline.
	ErrPolicyDeadline = errors.New("policy deadline exceeded")
	// ErrPolicyTrap: the policy crashed (a trap, a panic, out of memory).
	ErrPolicyTrap = errors.New("policy trapped")
	// ErrPolicyDeclined: the policy returned no decision on purpose.
	ErrPolicyDeclined = errors.New("policy declined")
	// ErrPolicyInvalidOutput: the policy's output could not be read.
	ErrPolicyInvalidOutput = errors.New("invalid policy output")
)

// FailureReason names the failure reason (a Failure* value) of a policy
// error for metrics and conditions: by the Err* value it wraps, a
// context deadline counting as FailureDeadline, and FailureError for
// anything else.
func FailureReason(err error) string {
	switch {
	case errors.Is(err, ErrPolicyDeadline), errors.Is(err, context.DeadlineExceeded):
		return FailureDeadline
	case errors.Is(err, ErrPolicyTrap):
		return FailureTrap
	case errors.Is(err, ErrPolicyDeclined):
		return FailureDeclined
	case errors.Is(err, ErrPolicyInvalidOutput):
		return FailureInvalidOutput
	case errors.Is(err, ErrPolicyUnusable):
		return FailureLoad
	}
	return FailureError
}

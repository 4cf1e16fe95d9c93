package ipam

import (
	"fmt"
	"slices"
)

// Operator is the operator of a selector Requirement.
type Operator string

// Operators, spelled as Kubernetes label selectors spell them.
const (
	OpIn           Operator = "In"
	OpNotIn        Operator = "NotIn"
	OpExists       Operator = "Exists"
	OpDoesNotExist Operator = "DoesNotExist"
)

// Requirement is one label requirement of a Selector.
type Requirement struct {
	Key      string
	Operator Operator
	Values   []string
}

// Selector matches label sets the way a Kubernetes LabelSelector does:
// every MatchLabels pair and every requirement must hold. The empty
// Selector matches every label set.
type Selector struct {
	MatchLabels      map[string]string
	MatchExpressions []Requirement
}

// Matches reports whether labels satisfy the selector.
func (s Selector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpressions {
		v, ok := labels[r.Key]
		switch r.Operator {
		case OpIn:
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case OpNotIn:
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false // Validate rejects these; never match by accident
		}
	}
	return true
}

// Validate reports a requirement whose operator is unknown or whose
// values do not fit its operator.
func (s Selector) Validate() error {
	for _, r := range s.MatchExpressions {
		switch r.Operator {
		case OpIn, OpNotIn:
			if len(r.Values) == 0 {
				return fmt.Errorf("requirement on %q: operator %s needs values", r.Key, r.Operator)
			}
		case OpExists, OpDoesNotExist:
			if len(r.Values) != 0 {
				return fmt.Errorf("requirement on %q: operator %s takes no values", r.Key, r.Operator)
			}
		default:
			return fmt.Errorf("requirement on %q: unknown operator %q (want In, NotIn, Exists or DoesNotExist)", r.Key, r.Operator)
		}
	}
	return nil
}

// anyMatches reports whether one of sels matches labels; no selector at
// all matches everything.
func anyMatches(sels []Selector, labels map[string]string) bool {
	if len(sels) == 0 {
		return true
	}
	for _, s := range sels {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}

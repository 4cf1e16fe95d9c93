package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// Outcome is what one spec did in one run.
type Outcome string

const (
	Pass Outcome = "pass"
	Fail Outcome = "fail"
	Skip Outcome = "skip"
	// Interrupted: the run was stopped by hand (SIGINT) inside the spec,
	// which neither passed nor failed.
	Interrupted Outcome = "interrupted"
)

// Result is one spec's result in one e2e.test run.
type Result struct {
	Spec string // the spec's full text, as --ginkgo.focus matches it
	// Setup is a suite node (SynchronizedBeforeSuite...), not a spec: its
	// name is its node type.
	Setup    bool
	Outcome  Outcome
	Reason   string // why it was skipped or how it failed (first line)
	Duration time.Duration
}

// junitSuites is the subset of ginkgo's JUnit report read here.
type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *junitFailure `xml:"failure"`
			Error   *junitFailure `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// ParseJUnit reads e2e.test's JUnit report (--report-dir's junit_01.xml,
// ginkgo v2's format: a spec is "[It] " and its full text, suite nodes
// are their type). Specs the focus filtered out appear there as skipped
// too: the caller keeps the ones it asked for (Table does).
func ParseJUnit(r io.Reader) ([]Result, error) {
	var s junitSuites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("conformance: junit report: %w", err)
	}
	var out []Result
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			spec, isSpec := strings.CutPrefix(c.Name, "[It] ")
			res := Result{Spec: spec, Setup: !isSpec, Duration: time.Duration(c.Time * float64(time.Second)).Round(time.Second)}
			switch {
			case c.Status == "passed" || (c.Status == "" && c.Skipped == nil && c.Failure == nil && c.Error == nil):
				res.Outcome = Pass
			case c.Status == "skipped" || c.Status == "pending" || (c.Status == "" && c.Skipped != nil):
				res.Outcome = Skip
				if c.Skipped != nil {
					res.Reason = skipReason(c.Skipped.Message)
				}
			case c.Status == "interrupted":
				res.Outcome = Interrupted
			default:
				res.Outcome = Fail
				res.Reason = failReason(c.Status, c.Failure, c.Error)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// skipReason drops ginkgo's "skipped" prefix: "skipped - Requires at
// least 2 nodes" is "Requires at least 2 nodes"; a plain "skipped" (the
// focus filtered the spec out) is empty.
func skipReason(msg string) string {
	msg = strings.TrimPrefix(msg, "skipped")
	msg = strings.TrimPrefix(msg, " - ")
	return firstLine(msg)
}

// failReason is the status (when not plain "failed") and the failure's
// first line.
func failReason(status string, fs ...*junitFailure) string {
	var msg string
	for _, f := range fs {
		if f == nil {
			continue
		}
		if msg = firstLine(f.Message); msg == "" {
			msg = firstLine(f.Text)
		}
		if msg != "" {
			break
		}
	}
	if status != "" && status != "failed" {
		msg = strings.TrimSpace(status + ": " + msg)
	}
	return msg
}

// firstLine is the first non-blank line of s, trimmed, at most 160 bytes.
func firstLine(s string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 160 {
				l = l[:157] + "..."
			}
			return l
		}
	}
	return ""
}

package main

import (
	"testing"

	"github.com/switchyard-lb/switchyard/test/conformance"
)

func TestRequirePassed(t *testing.T) {
	const (
		basic = "[sig-network] Services should serve a basic endpoint from pods [Conformance]"
		multi = "[sig-network] Services should serve multiport endpoints from pods [Conformance]"
		other = "[sig-storage] Volumes should store data"
	)
	filter, err := conformance.NewFilter(`\[sig-network\] Services should serve`, "")
	if err != nil {
		t.Fatal(err)
	}
	setup := conformance.Result{Spec: "[SynchronizedBeforeSuite]", Setup: true, Outcome: conformance.Pass}
	for _, tc := range []struct {
		name   string
		runs   []conformance.Result
		wantOK bool
	}{
		{"all selected passed", []conformance.Result{setup, {Spec: basic, Outcome: conformance.Pass}, {Spec: multi, Outcome: conformance.Pass},
			{Spec: other, Outcome: conformance.Skip}}, true},
		{"one failed", []conformance.Result{{Spec: basic, Outcome: conformance.Pass}, {Spec: multi, Outcome: conformance.Fail}}, false},
		{"one skipped itself", []conformance.Result{{Spec: basic, Outcome: conformance.Pass}, {Spec: multi, Outcome: conformance.Skip}}, false},
		{"none selected", []conformance.Result{setup, {Spec: other, Outcome: conformance.Pass}}, false},
		{"no run", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := requirePassed(map[string][]conformance.Result{conformance.Switchyard: tc.runs}, filter, []string{conformance.Switchyard})
			if (err == nil) != tc.wantOK {
				t.Errorf("requirePassed = %v, want ok %v", err, tc.wantOK)
			}
		})
	}
}

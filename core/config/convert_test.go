package config

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plugin/plugintest"
)

// testSchedulers stands for a dataplane's scheduler set.
var testSchedulers = plugintest.NewSchedulers("rr", "wlc", "mh")

// TestConvertV1alpha1 parses each v1alpha1 setting and its v1alpha2
// spelling: both give the same Config.
func TestConvertV1alpha1(t *testing.T) {
	tests := []struct {
		name               string
		v1alpha1, v1alpha2 string // after the header
	}{
		{"nothing", "", ""},
		{"empty dataplane", "dataplane: {}\n", "dataplane: {}\n"},
		{"mode", "dataplane:\n  mode: dryrun\n", "dataplane:\n  mode: dryrun\n"},
		{"syncPeriod", "dataplane:\n  ipvs:\n    syncPeriod: 1m\n", "dataplane:\n  syncPeriod: 1m\n"},
		{"minSyncPeriod", "dataplane:\n  ipvs:\n    minSyncPeriod: 100ms\n", "dataplane:\n  minSyncPeriod: 100ms\n"},
		{"masqueradeAll", "dataplane:\n  ipvs:\n    masqueradeAll: true\n", "dataplane:\n  masqueradeAll: true\n"},
		{"clusterCIDRs", "dataplane:\n  ipvs:\n    clusterCIDRs: [10.244.0.0/16, \"fd00::/64\"]\n", "dataplane:\n  clusterCIDRs: [10.244.0.0/16, \"fd00::/64\"]\n"},
		{"nodePortAddresses", "dataplane:\n  ipvs:\n    nodePortAddresses: [192.168.0.0/24]\n", "dataplane:\n  nodePortAddresses: [192.168.0.0/24]\n"},
		{"nodePortAddresses primary", "dataplane:\n  ipvs:\n    nodePortAddresses: [primary]\n", "dataplane:\n  nodePortAddresses: [primary]\n"},
		{"scheduler stays", "dataplane:\n  ipvs:\n    scheduler: wlc\n", "dataplane:\n  ipvs:\n    scheduler: wlc\n"},
		{"strictARP stays", "dataplane:\n  ipvs:\n    strictARP: false\n", "dataplane:\n  ipvs:\n    strictARP: false\n"},
		{"drainTimeout stays", "dataplane:\n  ipvs:\n    drainTimeout: 1m\n", "dataplane:\n  ipvs:\n    drainTimeout: 1m\n"},
		{
			"timeouts stay", "dataplane:\n  ipvs:\n    tcpTimeout: 1m\n    tcpFinTimeout: 2m\n    udpTimeout: 3m\n",
			"dataplane:\n  ipvs:\n    tcpTimeout: 1m\n    tcpFinTimeout: 2m\n    udpTimeout: 3m\n",
		},
		{
			"mixed", "dataplane:\n  mode: ipvs\n  ipvs:\n    scheduler: mh\n    syncPeriod: 10s\n    strictARP: true\n    clusterCIDRs: [10.0.0.0/8]\n",
			"dataplane:\n  mode: ipvs\n  syncPeriod: 10s\n  clusterCIDRs: [10.0.0.0/8]\n  ipvs:\n    scheduler: mh\n    strictARP: true\n",
		},
		{"other sections are the same", "conntrack: {maxPerCore: 0}\nserviceProxyName: x\n", "conntrack: {maxPerCore: 0}\nserviceProxyName: x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, err := Parse([]byte(headerV1alpha1 + tt.v1alpha1))
			if err != nil {
				t.Fatalf("Parse(v1alpha1): %v", err)
			}
			cur, err := Parse([]byte(header + tt.v1alpha2))
			if err != nil {
				t.Fatalf("Parse(v1alpha2): %v", err)
			}
			if diff := cmp.Diff(cur, old, cmpOpts); diff != "" {
				t.Errorf("v1alpha1 converted (-v1alpha2 +v1alpha1):\n%s", diff)
			}
			if old.APIVersion != APIVersion {
				t.Errorf("converted APIVersion = %q, want %q", old.APIVersion, APIVersion)
			}
		})
	}
}

// TestConvertV1alpha1EveryField converts a v1alpha1 file that sets every
// field: it is full.yaml, which TestParse checks field by field.
func TestConvertV1alpha1EveryField(t *testing.T) {
	parse := func(name string) *Config {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Parse(data)
		if err != nil {
			t.Fatalf("Parse(%s): %v", name, err)
		}
		return c
	}
	full := parse("full.yaml")
	// Settings v1alpha1 cannot hold other than detectLocal (which its
	// clusterCIDRs default alike) take their defaults there.
	d := defaults().Dataplane
	full.Dataplane.ForwardingMode, full.Dataplane.DSR = d.ForwardingMode, d.DSR
	if diff := cmp.Diff(full, parse("full-v1alpha1.yaml"), cmpOpts); diff != "" {
		t.Errorf("full-v1alpha1.yaml converted (-full.yaml +full-v1alpha1.yaml):\n%s", diff)
	}
}

// TestV1alpha1MovesCoverLayouts checks that v1alpha1Moves names every
// field in which the layouts differ, so the paths of errors and the hints
// for mixed layouts cannot miss one.
func TestV1alpha1MovesCoverLayouts(t *testing.T) {
	moved := map[string]string{}
	for _, m := range v1alpha1Moves {
		moved[m.v1alpha1] = m.v1alpha2
	}
	want := map[string]string{}
	old := reflect.TypeFor[v1alpha1IPVS]()
	for i := range old.NumField() {
		if f := old.Field(i); !f.Anonymous {
			name := f.Tag.Get("yaml")
			want["dataplane.ipvs."+name] = "dataplane." + name
			if _, ok := reflect.TypeFor[Dataplane]().FieldByName(f.Name); !ok {
				t.Errorf("v1alpha1 field %s has no Dataplane field to move to", f.Name)
			}
		}
	}
	cur := reflect.TypeFor[Dataplane]()
	for i := range cur.NumField() {
		if name := cur.Field(i).Tag.Get("yaml"); name != "mode" && name != "ipvs" && !slices.Contains(v1alpha2Only, name) {
			if _, ok := want["dataplane.ipvs."+name]; !ok {
				t.Errorf("Dataplane field %s has no v1alpha1 spelling in v1alpha1IPVS", name)
			}
		}
	}
	if diff := cmp.Diff(want, moved); diff != "" {
		t.Errorf("v1alpha1Moves (-layouts +table):\n%s", diff)
	}
}

// TestSchedulerCheck covers the default scheduler's check against a
// dataplane's set, in both versions: reported with the other problems,
// at its line.
func TestSchedulerCheck(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []FieldError
	}{
		{name: "supported", in: header + "dataplane: {ipvs: {scheduler: wlc}}\n"},
		{name: "the default", in: header},
		{
			name: "unknown, with another problem",
			in:   header + "dataplane:\n  syncPeriod: 10\n  ipvs:\n    scheduler: lc\n",
			want: []FieldError{
				{Path: "dataplane.syncPeriod", Line: 4, Msg: `invalid duration "10" (want a Go duration such as "30s" or "1m30s")`},
				{Path: "dataplane.ipvs.scheduler", Line: 6, Msg: `unknown scheduler "lc" (want rr, wlc, mh)`},
			},
		},
		{
			name: "unknown in v1alpha1",
			in:   headerV1alpha1 + "dataplane:\n  ipvs:\n    scheduler: fastest\n    syncPeriod: 10\n",
			want: []FieldError{
				{Path: "dataplane.ipvs.scheduler", Line: 5, Msg: `unknown scheduler "fastest" (want rr, wlc, mh)`},
				{Path: "dataplane.ipvs.syncPeriod", Line: 6, Msg: `invalid duration "10" (want a Go duration such as "30s" or "1m30s")`},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse([]byte(tt.in)); err != nil && tt.want == nil {
				t.Fatalf("Parse without the check: %v", err)
			}
			_, err := Parse([]byte(tt.in), SchedulerCheck(testSchedulers))
			var got []FieldError
			var errs Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					got = append(got, *e)
				}
			} else if err != nil {
				t.Fatalf("error is %T, want Errors: %v", err, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	// Without the check, a scheduler is any name: the dataplane decides.
	if _, err := Parse([]byte(header + "dataplane: {ipvs: {scheduler: fastest}}\n")); err != nil {
		t.Errorf("Parse without a check refused a scheduler: %v", err)
	}
}

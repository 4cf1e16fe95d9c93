//go:build linux

package ipvs

import (
	"cmp"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestDiffSorted(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		a, b, added, removed []int
	}{
		{name: "both empty"},
		{name: "all new", b: []int{1, 2}, added: []int{1, 2}},
		{name: "all gone", a: []int{1, 2}, removed: []int{1, 2}},
		{name: "same", a: []int{1, 2, 3}, b: []int{1, 2, 3}},
		{name: "interleaved", a: []int{1, 3, 5, 7}, b: []int{2, 3, 6, 7, 9}, added: []int{2, 6, 9}, removed: []int{1, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			added, removed := diffSorted(tc.a, tc.b, cmp.Compare[int])
			if diff := gocmp.Diff(tc.added, added, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("added (-want +got):\n%s", diff)
			}
			if diff := gocmp.Diff(tc.removed, removed, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("removed (-want +got):\n%s", diff)
			}
		})
	}
}

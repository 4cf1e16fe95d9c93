package ipam

import "testing"

func TestSelector(t *testing.T) {
	labels := map[string]string{"team": "web", "tier": "front"}
	tests := []struct {
		name string
		sel  Selector
		want bool
	}{
		{"empty matches all", Selector{}, true},
		{"labels match", Selector{MatchLabels: map[string]string{"team": "web"}}, true},
		{"label value differs", Selector{MatchLabels: map[string]string{"team": "db"}}, false},
		{"label missing", Selector{MatchLabels: map[string]string{"env": "prod"}}, false},
		{"in", Selector{MatchExpressions: []Requirement{{"tier", OpIn, []string{"front", "edge"}}}}, true},
		{"in, absent", Selector{MatchExpressions: []Requirement{{"env", OpIn, []string{"prod"}}}}, false},
		{"notin", Selector{MatchExpressions: []Requirement{{"tier", OpNotIn, []string{"front"}}}}, false},
		{"notin, absent", Selector{MatchExpressions: []Requirement{{"env", OpNotIn, []string{"prod"}}}}, true},
		{"exists", Selector{MatchExpressions: []Requirement{{"team", OpExists, nil}}}, true},
		{"doesnotexist", Selector{MatchExpressions: []Requirement{{"team", OpDoesNotExist, nil}}}, false},
		{"unknown operator never matches", Selector{MatchExpressions: []Requirement{{"team", "Gt", nil}}}, false},
		{"all must hold", Selector{
			MatchLabels:      map[string]string{"team": "web"},
			MatchExpressions: []Requirement{{"tier", OpIn, []string{"back"}}},
		}, false},
	}
	for _, tt := range tests {
		if got := tt.sel.Matches(labels); got != tt.want {
			t.Errorf("%s: Matches = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSelectorValidate(t *testing.T) {
	bad := []Selector{
		{MatchExpressions: []Requirement{{"a", OpIn, nil}}},
		{MatchExpressions: []Requirement{{"a", OpExists, []string{"x"}}}},
		{MatchExpressions: []Requirement{{"a", "Gt", []string{"1"}}}},
	}
	for _, s := range bad {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s)
		}
	}
	good := Selector{MatchLabels: map[string]string{"a": "b"}, MatchExpressions: []Requirement{{"a", OpNotIn, []string{"c"}}, {"d", OpDoesNotExist, nil}}}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

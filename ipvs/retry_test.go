package ipvs

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRetryDump(t *testing.T) {
	other := errors.New("permission denied")
	interrupted := fmt.Errorf("list: %w", ErrInterrupted)
	tests := []struct {
		name      string
		results   []error // one per attempt; nil ends
		wantCalls int
		wantValue int // the attempt whose value is returned, from 1
		wantErr   error
	}{
		{name: "first succeeds", results: []error{nil}, wantCalls: 1, wantValue: 1},
		{name: "interrupted once", results: []error{interrupted, nil}, wantCalls: 2, wantValue: 2},
		{name: "interrupted then other error", results: []error{interrupted, other}, wantCalls: 2, wantValue: 2, wantErr: other},
		{name: "other error is not retried", results: []error{other, nil}, wantCalls: 1, wantValue: 1, wantErr: other},
		{
			name:      "interrupted every time",
			results:   []error{interrupted, interrupted, interrupted, interrupted, interrupted, nil},
			wantCalls: dumpAttempts, wantValue: dumpAttempts, wantErr: ErrInterrupted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			v, err := retryDump(func() (int, error) {
				calls++
				return calls, tt.results[calls-1]
			})
			if calls != tt.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tt.wantCalls)
			}
			if diff := cmp.Diff(tt.wantValue, v); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

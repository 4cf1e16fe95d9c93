package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/switchyard-lb/switchyard/core/plugin"
)

func TestAddrErrors(t *testing.T) {
	a := &plugin.AddrError{Addr: netip.MustParseAddr("192.0.2.1"), Err: errors.New("boom")}
	b := &plugin.AddrError{Addr: netip.MustParseAddr("2001:db8::1"), Withdraw: true, Err: errors.New("gone")}
	tests := []struct {
		name string
		err  error
		want []*plugin.AddrError
	}{
		{name: "nil", err: nil},
		{name: "none", err: errors.New("closed")},
		{name: "one, wrapped", err: fmt.Errorf("announcer x: %w", a), want: []*plugin.AddrError{a}},
		{name: "joined and nested", err: errors.Join(errors.New("other"), fmt.Errorf("w: %w", errors.Join(a, b))), want: []*plugin.AddrError{a, b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plugin.AddrErrors(tt.err)
			if len(got) != len(tt.want) {
				t.Fatalf("AddrErrors = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("AddrErrors[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
	if got, want := b.Error(), "withdrawing 2001:db8::1: gone"; got != want {
		t.Errorf("Error = %q, want %q", got, want)
	}
	if !errors.Is(fmt.Errorf("x: %w", a), a.Err) {
		t.Error("an AddrError does not unwrap to its cause")
	}
}

func TestFailureReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("port http: %w", plugin.ErrPolicyDeadline), plugin.FailureDeadline},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), plugin.FailureDeadline},
		{fmt.Errorf("%w: guest panic", plugin.ErrPolicyTrap), plugin.FailureTrap},
		{fmt.Errorf("%w: no zone", plugin.ErrPolicyDeclined), plugin.FailureDeclined},
		{errors.Join(errors.New("x"), plugin.ErrPolicyInvalidOutput), plugin.FailureInvalidOutput},
		{fmt.Errorf("%w", plugin.ErrPolicyUnusable), plugin.FailureLoad},
		{errors.New("boom"), plugin.FailureError},
		{nil, plugin.FailureError},
	} {
		if got := plugin.FailureReason(tc.err); got != tc.want {
			t.Errorf("FailureReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

package abi_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/core/plugin"
	"github.com/switchyard-lb/switchyard/plugins/wasm/abi"
)

func TestDecode(t *testing.T) {
	base := plugin.PolicyResult{Weights: []uint32{3, 0, 65535}}
	full := plugin.PolicyResult{
		Weights: []uint32{1, 2, 3}, Scheduler: "mh", Flags: []string{"mh-port", "mh-fallback"},
		Reevaluate: 5 * time.Second,
	}
	// put32 returns a mutation writing v at off.
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { le.PutUint32(b[off:], v); return b }
	}
	tests := []struct {
		name   string
		res    plugin.PolicyResult
		n      int
		mutate func([]byte) []byte
		want   plugin.PolicyResult
		errMsg string // "" means success
	}{
		{name: "weights only", res: base, n: 3, want: base},
		{name: "scheduler, flags, reevaluate", res: full, n: 3, want: full},
		{name: "no endpoints", res: plugin.PolicyResult{}, n: 0, want: plugin.PolicyResult{Weights: []uint32{}}},
		{
			name: "larger header from a later minor", res: base, n: 3,
			mutate: func(b []byte) []byte {
				// Move the weights 8 bytes further and announce a 48-byte header.
				nb := make([]byte, len(b)+8)
				copy(nb, b[:40])
				copy(nb[48:], b[40:])
				le.PutUint32(nb[4:], 48)
				le.PutUint32(nb[8:], uint32(len(nb)))
				le.PutUint32(nb[16:], 48)
				return nb
			},
			want: base,
		},
		{name: "short", res: base, n: 3, mutate: func(b []byte) []byte { return b[:7] }, errMsg: "7 bytes, shorter than the output header"},
		{name: "oversized", res: base, n: 3, mutate: func(b []byte) []byte { return make([]byte, abi.MaxOutputSize(3)+1) }, errMsg: "limit 65548 for 3 endpoints"},
		{name: "wrong major", res: base, n: 3, mutate: func(b []byte) []byte { le.PutUint16(b[0:], 2); return b }, errMsg: "ABI major version 2, want 1"},
		{name: "header too small", res: base, n: 3, mutate: put32(4, 16), errMsg: "header_size 16, want at least 40"},
		{name: "header past end", res: base, n: 3, mutate: put32(4, 4096), errMsg: "header_size 4096 past"},
		{name: "total_size mismatch", res: base, n: 3, mutate: put32(8, 10), errMsg: "total_size 10, but the guest returned 52 bytes"},
		{name: "too few weights", res: base, n: 4, errMsg: "3 weights for 4 endpoints"},
		{name: "too many weights", res: base, n: 2, errMsg: "3 weights for 2 endpoints"},
		{name: "weights past end", res: base, n: 3, mutate: put32(16, 44), errMsg: "weights at 44..56 outside 40..52"},
		{name: "weights inside header", res: base, n: 3, mutate: put32(16, 8), errMsg: "weights at 8..20 outside"},
		{name: "weights offset overflow", res: base, n: 3, mutate: put32(16, 0xfffffffc), errMsg: "outside"},
		{name: "weight too large", res: plugin.PolicyResult{Weights: []uint32{1, 65536}}, n: 2, errMsg: "weight 65536 of endpoint 1 above 65535"},
		{name: "reevaluate too small", res: base, n: 3, mutate: put32(20, 999), errMsg: "reevaluate_ms 999 outside 1000..3600000"},
		{name: "reevaluate too large", res: base, n: 3, mutate: put32(20, 3600001), errMsg: "reevaluate_ms 3600001"},
		{name: "unknown scheduler", res: plugin.PolicyResult{Weights: []uint32{1}, Scheduler: "random"}, n: 1, errMsg: `scheduler "random" not one of rr wrr`},
		{name: "flags without scheduler", res: plugin.PolicyResult{Weights: []uint32{1}, Flags: []string{"mh-port"}}, n: 1, errMsg: `scheduler flags "mh-port" without a scheduler`},
		{name: "flag of another scheduler", res: plugin.PolicyResult{Weights: []uint32{1}, Scheduler: "sh", Flags: []string{"mh-port"}}, n: 1, errMsg: `flag "mh-port" not allowed with "sh"`},
		{name: "repeated flag", res: plugin.PolicyResult{Weights: []uint32{1}, Scheduler: "sh", Flags: []string{"sh-port", "sh-port"}}, n: 1, errMsg: `flag "sh-port" repeated`},
		{name: "too many flags", res: plugin.PolicyResult{Weights: []uint32{1}, Scheduler: "sh", Flags: []string{"a", "b", "c", "d", "e"}}, n: 1, errMsg: "5 scheduler flags, limit 4"},
		{name: "scheduler string past end", res: full, n: 3, mutate: put32(24, 1000), errMsg: "scheduler at 1000..1002 past"},
		{name: "flags string past end", res: full, n: 3, mutate: put32(36, 1000), errMsg: "flags at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := abi.EncodeOutput(nil, tt.res)
			if tt.mutate != nil {
				out = tt.mutate(out)
			}
			got, err := abi.Decode(out, tt.n)
			if tt.errMsg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errMsg) || !errors.Is(err, abi.ErrInvalidOutput) {
					t.Fatalf("Decode() error = %v, want ErrInvalidOutput containing %q", err, tt.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeAllProblems: an output with several problems is reported
// with all of them at once, behind one "invalid policy output:" prefix.
func TestDecodeAllProblems(t *testing.T) {
	weights := make([]uint32, 7)
	for i := range weights {
		weights[i] = abi.MaxWeight + 1 + uint32(i)
	}
	out := abi.EncodeOutput(nil, plugin.PolicyResult{Weights: weights, Scheduler: "sh", Flags: []string{"mh-port", "sh-port", "sh-port"}})
	le.PutUint32(out[8:], 10)   // total_size
	le.PutUint32(out[20:], 999) // reevaluate_ms
	_, err := abi.Decode(out, 7)
	var oe *abi.OutputError
	if !errors.As(err, &oe) || !errors.Is(err, abi.ErrInvalidOutput) {
		t.Fatalf("Decode() error = %v, want an *abi.OutputError that is ErrInvalidOutput", err)
	}
	want := []string{
		fmt.Sprintf("total_size 10, but the guest returned %d bytes", len(out)),
		"reevaluate_ms 999 outside 1000..3600000",
		`scheduler flag "mh-port" not allowed with "sh"`,
		`scheduler flag "sh-port" repeated`,
		"weight 65536 of endpoint 0 above 65535",
		"weight 65537 of endpoint 1 above 65535",
		"weight 65538 of endpoint 2 above 65535",
		"weight 65539 of endpoint 3 above 65535",
		"3 more weights above 65535",
	}
	if diff := cmp.Diff(want, oe.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if n := strings.Count(err.Error(), "invalid policy output"); n != 1 || !strings.HasPrefix(err.Error(), "invalid policy output: total_size 10") {
		t.Errorf("error %q: want one \"invalid policy output: \" prefix, then the problems", err)
	}
}

// FuzzDecode: Decode never panics on garbage, and whatever it accepts
// survives a round trip through EncodeOutput unchanged.
func FuzzDecode(f *testing.F) {
	f.Add(abi.EncodeOutput(nil, plugin.PolicyResult{Weights: []uint32{1, 2}}), 2)
	f.Add(abi.EncodeOutput(nil, plugin.PolicyResult{Weights: []uint32{7}, Scheduler: "sh", Flags: []string{"sh-port"}, Reevaluate: time.Minute}), 1)
	f.Add([]byte{1, 0, 0, 0, 40, 0, 0, 0}, 0)
	f.Add([]byte("garbage"), 3)
	f.Fuzz(func(t *testing.T, out []byte, n int) {
		if n < 0 || n > abi.MaxEndpoints {
			return
		}
		res, err := abi.Decode(out, n)
		if err != nil {
			if !errors.Is(err, abi.ErrInvalidOutput) {
				t.Fatalf("error %v does not wrap ErrInvalidOutput", err)
			}
			return
		}
		if len(res.Weights) != n {
			t.Fatalf("%d weights for %d endpoints", len(res.Weights), n)
		}
		again, err := abi.Decode(abi.EncodeOutput(nil, res), n)
		if err != nil {
			t.Fatalf("re-encoded output rejected: %v", err)
		}
		if diff := cmp.Diff(res, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

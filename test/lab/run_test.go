package lab

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

func TestCopyUntilMarker(t *testing.T) {
	const nonce = "0123abcd"
	tests := []struct {
		name      string
		in        string
		wantOut   string
		wantCode  int
		wantFound bool
		wantErr   bool
	}{
		{
			name:    "output then marker",
			in:      "=== RUN TestX\nPASS\nSWITCHYARD_LAB_EXIT 0123abcd 0\n",
			wantOut: "=== RUN TestX\nPASS\n", wantCode: 0, wantFound: true,
		},
		{
			name:    "non-zero code",
			in:      "FAIL\nSWITCHYARD_LAB_EXIT 0123abcd 1\nignored after the marker\n",
			wantOut: "FAIL\n", wantCode: 1, wantFound: true,
		},
		{
			name:    "marker after output without final newline",
			in:      "partial lineSWITCHYARD_LAB_EXIT 0123abcd 7\n",
			wantOut: "partial line", wantCode: 7, wantFound: true,
		},
		{
			name:    "forged marker with another nonce is output",
			in:      "SWITCHYARD_LAB_EXIT ffff 0\nSWITCHYARD_LAB_EXIT 0123abcd 1\n",
			wantOut: "SWITCHYARD_LAB_EXIT ffff 0\n", wantCode: 1, wantFound: true,
		},
		{
			name:    "no marker",
			in:      "panic: something\n",
			wantOut: "panic: something\n",
		},
		{
			name:    "marker cut short",
			in:      "ok\nSWITCHYARD_LAB_EXIT 0123abcd ",
			wantOut: "ok\n", wantErr: true,
		},
		{
			name: "empty",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code, found, err := copyUntilMarker(&out, iotest.OneByteReader(strings.NewReader(tc.in)), nonce)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error: %t", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
			if code != tc.wantCode || found != tc.wantFound {
				t.Errorf("code, found = %d, %t; want %d, %t", code, found, tc.wantCode, tc.wantFound)
			}
		})
	}
}

func TestCopyUntilMarkerReadError(t *testing.T) {
	boom := errors.New("boom")
	_, found, err := copyUntilMarker(&strings.Builder{}, iotest.ErrReader(boom), "n")
	if found || !errors.Is(err, boom) {
		t.Errorf("found, err = %t, %v; want false, %v", found, err, boom)
	}
}

func TestBzImagePayloadRejectsNonKernels(t *testing.T) {
	for name, img := range map[string][]byte{
		"empty":     nil,
		"no header": make([]byte, 4096),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := bzImagePayload(img); err == nil {
				t.Error("bzImagePayload accepted a file that is not a bzImage")
			}
		})
	}
}

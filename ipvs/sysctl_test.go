package ipvs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestProcSysctlsOnADirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net/ipv4/vs/conntrack"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := ProcSysctls{Root: root}

	tests := []struct {
		name    string
		param   string
		wantErr error // nil, ErrNotFound, or errAny
	}{
		{name: "existing", param: "net/ipv4/vs/conntrack"},
		{name: "missing", param: "net/ipv4/vs/nope", wantErr: ErrNotFound},
		{name: "absolute", param: "/etc/passwd", wantErr: errAny},
		{name: "escapes the root", param: "net/../../etc/passwd", wantErr: errAny},
		{name: "empty", param: "", wantErr: errAny},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Set(tc.param, "1")
			checkErr(t, "Set", err, tc.wantErr)
			got, err := s.Get(tc.param)
			checkErr(t, "Get", err, tc.wantErr)
			if tc.wantErr == nil && got != "1" {
				t.Errorf("Get after Set = %q, want 1", got)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(root, "net/ipv4/vs/nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Set created a missing parameter (stat: %v)", err)
	}
}

var errAny = errors.New("any error")

func checkErr(t *testing.T, op string, err, want error) {
	t.Helper()
	switch {
	case want == nil && err != nil:
		t.Errorf("%s: %v", op, err)
	case want == errAny && err == nil:
		t.Errorf("%s: no error, want one", op)
	case want != nil && want != errAny && !errors.Is(err, want):
		t.Errorf("%s: error %v, want %v", op, err, want)
	}
}

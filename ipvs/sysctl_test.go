package ipvs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-lb/switchyard/ipvs"
)

func TestProcSysctlsOnADirectory(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/vs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net/ipv4/vs/conntrack"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := ipvs.ProcSysctls{Root: root}

	tests := []struct {
		name    string
		param   string
		wantErr error // nil, ipvs.ErrNotFound, or errInvalid (any error)
	}{
		{name: "existing", param: "net/ipv4/vs/conntrack"},
		{name: "missing", param: "net/ipv4/vs/nope", wantErr: ipvs.ErrNotFound},
		{name: "absolute", param: "/etc/passwd", wantErr: errInvalid},
		{name: "escapes the root", param: "net/../../etc/passwd", wantErr: errInvalid},
		{name: "empty", param: "", wantErr: errInvalid},
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

func checkErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if m := errMismatch(err, want); m != "" {
		t.Errorf("%s: %s", op, m)
	}
}

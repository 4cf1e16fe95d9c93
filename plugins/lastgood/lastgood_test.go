package lastgood_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-lb/switchyard/plugins/lastgood"
)

func version(module, params string) lastgood.Version {
	sum := sha256.Sum256([]byte(module))
	v := lastgood.Version{Digest: hex.EncodeToString(sum[:]), Revision: "4711", Module: []byte(module)}
	if params != "" {
		v.Params = []byte(params)
	}
	return v
}

// TestDirKeeps: a saved version loads back as it was, a second save
// replaces it, Names lists what is kept and Remove forgets it; a crash's
// temporary file is cleaned up and never listed.
func TestDirKeeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "last-good")
	d, err := lastgood.New(path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load("canary"); !errors.Is(err, lastgood.ErrNone) {
		t.Errorf("Load before Save: %v, want ErrNone", err)
	}
	for _, v := range []lastgood.Version{version("\x00asm v1\nwith a newline", `{"w":1}`), version("\x00asm v2", "")} {
		if err := d.Save("canary", v); err != nil {
			t.Fatal(err)
		}
		got, err := d.Load("canary")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("Load after Save (-want +got):\n%s", diff)
		}
	}
	if err := d.Save("zone.v2", version("z", "")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, ".canary.123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	names, err := d.Names()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"canary", "zone.v2"}, names); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if _, err := lastgood.New(path, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(path, ".canary.123")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a crash's temporary file is still there after New: %v", err)
	}
	if err := d.Remove("canary"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("canary"); err != nil {
		t.Errorf("Remove of nothing kept: %v", err)
	}
	if _, err := d.Load("canary"); !errors.Is(err, lastgood.ErrNone) {
		t.Errorf("Load after Remove: %v, want ErrNone", err)
	}
	for _, bad := range []string{"", "../etc", ".hidden", `a\b`} {
		if err := d.Save(bad, version("m", "")); err == nil || !strings.Contains(err.Error(), "not a valid policy name") {
			t.Errorf("Save(%q) = %v, want the name refused", bad, err)
		}
	}
}

// TestDirRefusesDamaged: a file that cannot be trusted loads as
// ErrDamaged, never as a version.
func TestDirRefusesDamaged(t *testing.T) {
	good := version("\x00asm module", `{"w":1}`)
	rec := `{"sha256":"` + good.Digest + `","revision":"4711","params":{"w":1}}`
	for _, tc := range []struct {
		name, content, want string
	}{
		{"truncated module", rec + "\n\x00asm mod", "module sha256"},
		{"a flipped byte", rec + "\n\x00asm modulE", "module sha256"},
		{"no record line", "\x00asm module", "no record line"},
		{"empty", "", "no record line"},
		{"record not JSON", "sha256=" + good.Digest + "\n\x00asm module", "record:"},
		{"unknown record field", `{"sha256":"` + good.Digest + `","evil":1}` + "\n\x00asm module", "record:"},
		{"over the size limit", rec + "\n" + strings.Repeat("x", 65), "over the 64 byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := t.TempDir()
			d, err := lastgood.New(path, 64)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(path, "canary.lastgood"), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := d.Load("canary")
			if !errors.Is(err, lastgood.ErrDamaged) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load = %+v, %v; want ErrDamaged saying %q", v, err, tc.want)
			}
		})
	}
}

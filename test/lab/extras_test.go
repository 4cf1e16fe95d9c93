package lab

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

// fakeDeps serves loader dependencies from a table instead of ELF headers.
func fakeDeps(table map[string]elfDeps) readELFDeps {
	return func(_ fs.FS, name string) (elfDeps, error) { return table[name], nil }
}

func TestExtrasClosure(t *testing.T) {
	file := func(data string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(data), Mode: 0o755} }
	link := func(target string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink}
	}
	host := fstest.MapFS{
		"usr/sbin/iptables":          link("/etc/alternatives/iptables"),
		"etc/alternatives/iptables":  link("/usr/sbin/xtables-nft-multi"),
		"usr/sbin/xtables-nft-multi": file("ELF multi"),
		"usr/sbin/ipset":             file("ELF ipset"),
		"usr/sbin/script":            file("#!/bin/sh"),
		"bin/static":                 file("ELF static"),
		// libmnl.so.0 is a relative link to the versioned file.
		"lib/x86_64-linux-gnu/libmnl.so.0":               link("libmnl.so.0.2.0"),
		"lib/x86_64-linux-gnu/libmnl.so.0.2.0":           file("ELF mnl"),
		"lib/x86_64-linux-gnu/libc.so.6":                 file("ELF libc"),
		"lib/x86_64-linux-gnu/libipset.so.13":            file("ELF libipset"),
		"usr/lib/x86_64-linux-gnu/libxtables.so":         file("ELF xtables"),
		"lib64/ld-linux-x86-64.so.2":                     link("../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
		"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2":      file("ELF ld"),
		"usr/lib/x86_64-linux-gnu/xtables/libxt_set.so":  file("ELF xt_set"),
		"usr/lib/x86_64-linux-gnu/xtables/libxt_mark.so": link("libxt_MARK.so"),
		"usr/lib/x86_64-linux-gnu/xtables/libxt_MARK.so": file("ELF MARK"),
		"usr/sbin/needs-missing":                         file("ELF broken"),
		"usr/sbin/loop":                                  link("loop"),
		"usr/sbin/totmp":                                 link("../../tmp/bench/switchyard"),
		"tmp/bench/switchyard":                           file("ELF static"),
		// FRR's layout: libfrr is found only through the run path.
		"usr/lib/frr/bgpd":                         file("ELF bgpd"),
		"usr/lib/x86_64-linux-gnu/frr/libfrr.so.0": file("ELF libfrr"),
		"opt/tool/bin/tool":                        file("ELF tool"),
		"opt/tool/lib/libtool.so.1":                file("ELF libtool"),
	}
	const interp = "/lib64/ld-linux-x86-64.so.2"
	deps := fakeDeps(map[string]elfDeps{
		"usr/sbin/xtables-nft-multi":                    {Interp: interp, Needed: []string{"libxtables.so", "libmnl.so.0", "libc.so.6"}},
		"usr/sbin/ipset":                                {Interp: interp, Needed: []string{"libipset.so.13", "libc.so.6"}},
		"lib/x86_64-linux-gnu/libipset.so.13":           {Needed: []string{"libmnl.so.0", "libc.so.6"}},
		"lib/x86_64-linux-gnu/libmnl.so.0":              {Needed: []string{"libc.so.6"}},
		"usr/lib/x86_64-linux-gnu/xtables/libxt_set.so": {Needed: []string{"libxtables.so", "libc.so.6"}},
		"usr/sbin/needs-missing":                        {Interp: interp, Needed: []string{"libgone.so.1"}},
		"usr/lib/frr/bgpd":                              {Interp: interp, Needed: []string{"libfrr.so.0", "libc.so.6"}, RunPath: []string{"/usr/lib/x86_64-linux-gnu/frr"}},
		"usr/lib/x86_64-linux-gnu/frr/libfrr.so.0":      {Needed: []string{"libc.so.6"}},
		"opt/tool/bin/tool":                             {Interp: interp, Needed: []string{"libtool.so.1"}, RunPath: []string{"relative/lib", "$ORIGIN/../lib"}},
	})
	reg := func(name string) extraFile { return extraFile{Guest: name, Mode: 0o755} }
	lnk := func(name, target string) extraFile { return extraFile{Guest: name, Link: target} }
	libc := reg("lib/x86_64-linux-gnu/libc.so.6")
	// The interpreter is stored as a file at the path PT_INTERP names; the
	// guest needs no host symlink layout to find it.
	ld := reg("lib64/ld-linux-x86-64.so.2")

	tests := []struct {
		name    string
		extras  []string
		want    []extraFile
		wantErr string
	}{
		{
			name:   "static binary needs nothing else",
			extras: []string{"/bin/static"},
			want:   []extraFile{reg("bin/static")},
		},
		{
			name:   "a script is not ELF",
			extras: []string{"/usr/sbin/script"},
			want:   []extraFile{reg("usr/sbin/script")},
		},
		{
			name:   "symlink chain kept, target and its libraries follow, each once",
			extras: []string{"/usr/sbin/iptables", "/usr/sbin/ipset"},
			want: []extraFile{
				lnk("etc/alternatives/iptables", "usr/sbin/xtables-nft-multi"),
				libc,
				reg("lib/x86_64-linux-gnu/libipset.so.13"),
				// Found by its name, stored with its target's content.
				reg("lib/x86_64-linux-gnu/libmnl.so.0"),
				ld,
				reg("usr/lib/x86_64-linux-gnu/libxtables.so"),
				reg("usr/sbin/ipset"),
				lnk("usr/sbin/iptables", "etc/alternatives/iptables"),
				reg("usr/sbin/xtables-nft-multi"),
			},
		},
		{
			name:   "directory copied whole with relative links made absolute",
			extras: []string{"/usr/lib/x86_64-linux-gnu/xtables/"},
			want: []extraFile{
				libc,
				reg("usr/lib/x86_64-linux-gnu/libxtables.so"),
				reg("usr/lib/x86_64-linux-gnu/xtables/libxt_MARK.so"),
				lnk("usr/lib/x86_64-linux-gnu/xtables/libxt_mark.so", "usr/lib/x86_64-linux-gnu/xtables/libxt_MARK.so"),
				reg("usr/lib/x86_64-linux-gnu/xtables/libxt_set.so"),
			},
		},
		{
			name:   "library found through the run path",
			extras: []string{"/usr/lib/frr/bgpd"},
			want: []extraFile{
				libc, ld,
				reg("usr/lib/frr/bgpd"),
				reg("usr/lib/x86_64-linux-gnu/frr/libfrr.so.0"),
			},
		},
		{
			name:   "run path relative to $ORIGIN; a plain relative one ignored",
			extras: []string{"/opt/tool/bin/tool"},
			want:   []extraFile{ld, reg("opt/tool/bin/tool"), reg("opt/tool/lib/libtool.so.1")},
		},
		{name: "missing library", extras: []string{"/usr/sbin/needs-missing"}, wantErr: "needs libgone.so.1"},
		{name: "missing extra", extras: []string{"/usr/sbin/nope"}, wantErr: "/usr/sbin/nope"},
		{name: "relative path", extras: []string{"usr/sbin/ipset"}, wantErr: "absolute"},
		{name: "under the guest's tmpfs", extras: []string{"/tmp/bench/switchyard"}, wantErr: "mounts over /tmp"},
		{name: "link into the guest's tmpfs", extras: []string{"/usr/sbin/totmp"}, wantErr: "mounts over /tmp"},
		{name: "symlink loop", extras: []string{"/usr/sbin/loop"}, want: []extraFile{lnk("usr/sbin/loop", "usr/sbin/loop")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := extrasClosure(host, tc.extras, deps)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("extrasClosure error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("closure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExtrasClosureHostBinary reads real ELF headers: a dynamically linked
// host program brings the loader and libc.
func TestExtrasClosureHostBinary(t *testing.T) {
	bin := "/usr/bin/env"
	d, err := elfDepsOf(os.DirFS("/"), bin[1:])
	if err != nil {
		t.Fatal(err)
	}
	if d.Interp == "" {
		t.Skipf("%s is statically linked on this host", bin)
	}
	got, err := extrasClosure(os.DirFS("/"), []string{bin}, elfDepsOf)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, e := range got {
		names[filepath.Base(e.Guest)] = true
	}
	for _, want := range []string{"env", filepath.Base(d.Interp), "libc.so.6"} {
		if !names[want] {
			t.Errorf("closure of %s lacks %s: %+v", bin, want, got)
		}
	}
	// Debian's FRR finds libfrr through its RUNPATH only.
	if _, err := os.Stat("/usr/lib/frr/bgpd"); err == nil {
		got, err := extrasClosure(os.DirFS("/"), []string{"/usr/lib/frr/bgpd"}, elfDepsOf)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(got, func(e extraFile) bool { return e.Guest == "usr/lib/x86_64-linux-gnu/frr/libfrr.so.0" }) {
			t.Errorf("closure of bgpd lacks libfrr.so.0: %+v", got)
		}
	}
	// A static file is not ELF-dependent: busybox-static has no loader.
	if sd, err := elfDepsOf(os.DirFS("/"), "bin/busybox"); err == nil && (sd.Interp != "" || len(sd.Needed) > 0) {
		t.Errorf("static busybox reported dependencies %+v", sd)
	}
}

func TestWriteJobArchiveExtra(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/tool"), []byte("TOOL"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	j := jobFiles{Binary: bin, Nonce: "n", ExtraRoot: root, Extra: []extraFile{
		{Guest: "usr/sbin/alias", Link: "usr/sbin/tool"},
		{Guest: "usr/sbin/tool", Mode: 0o755},
	}}
	if err := writeJobArchive(&buf, j); err != nil {
		t.Fatal(err)
	}
	var got []cpioEntry
	for _, e := range readCPIO(t, buf.Bytes()) {
		if strings.HasPrefix(e.Name, "usr") {
			got = append(got, e)
		}
	}
	want := []cpioEntry{
		{Name: "usr", Mode: cpioDir | 0o755},
		{Name: "usr/sbin", Mode: cpioDir | 0o755},
		{Name: "usr/sbin/alias", Mode: cpioSymlink | 0o777, Data: "/usr/sbin/tool"},
		{Name: "usr/sbin/tool", Mode: cpioRegular | 0o755, Data: "TOOL"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extra files in the job archive (-want +got):\n%s", diff)
	}
}

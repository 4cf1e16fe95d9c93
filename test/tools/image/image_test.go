package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	helloOnce sync.Once
	helloPath string
	helloErr  error
	helloDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if helloDir != "" {
		os.RemoveAll(helloDir)
	}
	os.Exit(code)
}

// staticBinary builds a tiny static Go program, once: the image takes any
// static binary, and the daemon's own takes far longer to build (make image
// uses the real one).
func staticBinary(t *testing.T) string {
	t.Helper()
	helloOnce.Do(func() {
		if helloDir, helloErr = os.MkdirTemp("", "image-test-"); helloErr != nil {
			return
		}
		src := "package main\n\nfunc main() { println(\"hello from the image\") }\n"
		if helloErr = os.WriteFile(filepath.Join(helloDir, "main.go"), []byte(src), 0o644); helloErr != nil {
			return
		}
		if helloErr = os.WriteFile(filepath.Join(helloDir, "go.mod"), []byte("module hello\n\ngo 1.26\n"), 0o644); helloErr != nil {
			return
		}
		helloPath = filepath.Join(helloDir, "hello")
		cmd := exec.Command("go", "build", "-trimpath", "-o", helloPath, ".")
		cmd.Dir = helloDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			helloErr = fmt.Errorf("go build: %w\n%s", err, b)
		}
	})
	if helloErr != nil {
		t.Fatal(helloErr)
	}
	return helloPath
}

func testSpec(t *testing.T) spec {
	t.Helper()
	bin := staticBinary(t)
	return spec{
		Binaries:   []binary{{Name: "switchyard", Path: bin}, {Name: "yardctl", Path: bin}},
		Entrypoint: "switchyard",
		Version:    "v0.1.0-3-gabcdef0",
		Source:     "https://github.com/switchyard-lb/switchyard",
		Revision:   "abcdef0123456789abcdef0123456789abcdef01",
		Arch:       "amd64",
		Created:    time.Unix(1764547200, 0).UTC(),
	}
}

type file struct {
	Type     byte
	Mode     int64
	UID, GID int
	ModTime  time.Time
	Size     int64
}

func layerFiles(t *testing.T, img v1.Image) (map[string]file, []string, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]file{}
	var order []string
	data := map[string][]byte{}
	eachTarEntry(t, rc, func(h *tar.Header, r io.Reader) {
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, ModTime: h.ModTime.UTC(), Size: h.Size}
		order = append(order, h.Name)
		data[h.Name] = b
	})
	return files, order, data
}

// eachTarEntry calls f with every entry of the tar stream in r, in order.
func eachTarEntry(t *testing.T, r io.Reader, f func(h *tar.Header, r io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(h, tr)
	}
}

// mustBuild builds the image of s, failing the test if it cannot.
func mustBuild(t *testing.T, s spec) v1.Image {
	t.Helper()
	img, err := build(s)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestBuild(t *testing.T) {
	s := testSpec(t)
	img := mustBuild(t, s)

	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantConfig := v1.Config{
		Entrypoint: []string{"/usr/local/bin/switchyard"},
		Env:        []string{"PATH=/usr/local/bin"},
		User:       "0:0",
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":    "switchyard",
			"org.opencontainers.image.source":   "https://github.com/switchyard-lb/switchyard",
			"org.opencontainers.image.version":  "v0.1.0-3-gabcdef0",
			"org.opencontainers.image.revision": "abcdef0123456789abcdef0123456789abcdef01",
		},
	}
	if diff := cmp.Diff(wantConfig, cfg.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || !cfg.Created.Time.Equal(s.Created) {
		t.Errorf("os/arch/created = %s/%s/%v, want linux/amd64/%v", cfg.OS, cfg.Architecture, cfg.Created.Time, s.Created)
	}
	if mt, err := img.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type = %q, %v; want %q", mt, err, types.OCIManifestSchema1)
	}

	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
		t.Errorf("layer media type = %q, %v; want %q", mt, err, types.OCILayer)
	}
	files, order, data := layerFiles(t, img)
	bin, err := os.ReadFile(s.Binaries[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(bin))
	dir := func(mode int64) file { return file{Type: tar.TypeDir, Mode: mode, ModTime: s.Created} }
	exe := file{Type: tar.TypeReg, Mode: 0o755, ModTime: s.Created, Size: size}
	want := map[string]file{
		"tmp/":                     dir(0o1777),
		"usr/":                     dir(0o755),
		"usr/local/":               dir(0o755),
		"usr/local/bin/":           dir(0o755),
		"usr/local/bin/switchyard": exe,
		"usr/local/bin/yardctl":    exe,
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("layer files (-want +got):\n%s", diff)
	}
	// Parents before children, in a fixed order.
	wantOrder := []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/switchyard", "usr/local/bin/yardctl"}
	if diff := cmp.Diff(wantOrder, order); diff != "" {
		t.Errorf("layer order (-want +got):\n%s", diff)
	}
	if !bytes.Equal(data["usr/local/bin/switchyard"], bin) {
		t.Error("usr/local/bin/switchyard differs from the binary given")
	}
}

func TestBuildRejectsAMissingEntrypoint(t *testing.T) {
	s := testSpec(t)
	s.Entrypoint = "kube-proxy"
	if _, err := build(s); err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Errorf("build with an entrypoint that is not a binary: err = %v", err)
	}
}

// TestReproducible builds the image again from the same inputs (same digest,
// byte-identical files written) and from changed ones (another digest).
func TestReproducible(t *testing.T) {
	s := testSpec(t)
	digest := func(s spec) v1.Hash {
		t.Helper()
		img := mustBuild(t, s)
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(s)
	if again := digest(s); again != first {
		t.Errorf("same inputs, digests %s and %s", first, again)
	}

	other := s
	other.Version = "v0.1.1"
	if d := digest(other); d == first {
		t.Error("another version gives the same digest")
	}
	later := s
	later.Created = s.Created.Add(time.Second)
	if d := digest(later); d == first {
		t.Error("another creation time gives the same digest")
	}
	changed := s
	changed.Binaries = append([]binary(nil), s.Binaries...)
	copyPath := filepath.Join(t.TempDir(), "yardctl")
	b, err := os.ReadFile(s.Binaries[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, append(b, 0), 0o600); err != nil {
		t.Fatal(err)
	}
	changed.Binaries[1].Path = copyPath
	if d := digest(changed); d == first {
		t.Error("another binary gives the same digest")
	}

	// The files written: the same bytes twice, whatever the files' own
	// modes and times on disk.
	write := func() (archive, index []byte) {
		t.Helper()
		dir := t.TempDir()
		args := []string{
			"-bin", "switchyard=" + s.Binaries[0].Path, "-bin", "yardctl=" + s.Binaries[1].Path,
			"-version", s.Version, "-created", "1764547200", "-arch", "amd64",
			"-tag", "switchyard:" + s.Version, "-tag", "switchyard:dev",
			"-oci", filepath.Join(dir, "oci"), "-tar", filepath.Join(dir, "image.tar"),
		}
		if err := run(args); err != nil {
			t.Fatal(err)
		}
		archive, err := os.ReadFile(filepath.Join(dir, "image.tar"))
		if err != nil {
			t.Fatal(err)
		}
		index, err = os.ReadFile(filepath.Join(dir, "oci", "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		return archive, index
	}
	a1, i1 := write()
	if err := os.Chtimes(s.Binaries[0].Path, time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	a2, i2 := write()
	if !bytes.Equal(a1, a2) {
		t.Error("two docker archives of the same inputs differ")
	}
	if !bytes.Equal(i1, i2) {
		t.Errorf("two OCI layouts of the same inputs differ:\n%s\n%s", i1, i2)
	}
}

// TestWrittenImagesReadBack reads both outputs back the way a runtime does:
// the layout's index names each tag, the archive's manifest lists the tags
// (ctr images import and docker load read RepoTags), and both hold the
// built image's config and layer.
func TestWrittenImagesReadBack(t *testing.T) {
	s := testSpec(t)
	img := mustBuild(t, s)
	tags, err := parseTags([]string{"switchyard:" + s.Version, "switchyard:dev"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ociDir, archive := filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar")
	// Writing over an earlier layout replaces it (no manifests left over).
	if err := writeLayout(ociDir, img, tags[:1]); err != nil {
		t.Fatal(err)
	}
	if err := writeLayout(ociDir, img, tags); err != nil {
		t.Fatal(err)
	}
	if err := writeArchive(archive, img, tags, s.Created); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	configName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}

	index, err := layout.ImageIndexFromPath(ociDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var refNames []string
	for _, m := range im.Manifests {
		refNames = append(refNames, m.Annotations["org.opencontainers.image.ref.name"])
		if m.Digest != digest || m.MediaType != types.OCIManifestSchema1 {
			t.Errorf("layout manifest %s %s, want %s %s", m.MediaType, m.Digest, types.OCIManifestSchema1, digest)
		}
	}
	if diff := cmp.Diff([]string{s.Version, "dev"}, refNames); diff != "" {
		t.Errorf("layout ref names (-want +got):\n%s", diff)
	}

	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	eachTarEntry(t, f, func(h *tar.Header, r io.Reader) {
		if h.Name == "manifest.json" {
			if err := json.NewDecoder(r).Decode(&manifest); err != nil {
				t.Fatal(err)
			}
		}
	})
	if len(manifest) != 1 {
		t.Fatalf("archive manifest.json has %d images, want 1", len(manifest))
	}
	if diff := cmp.Diff([]string{"switchyard:" + s.Version, "switchyard:dev"}, manifest[0].RepoTags); diff != "" {
		t.Errorf("archive RepoTags (-want +got):\n%s", diff)
	}
	for _, tag := range tags {
		got, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("%s from the archive: %v", tag, err)
		}
		if c, err := got.ConfigName(); err != nil || c != configName {
			t.Errorf("%s from the archive: config %s, %v; want %s", tag, c, err, configName)
		}
		gotFiles, _, _ := layerFiles(t, got)
		wantFiles, _, _ := layerFiles(t, img)
		if diff := cmp.Diff(wantFiles, gotFiles); diff != "" {
			t.Errorf("%s from the archive: layer (-built +read):\n%s", tag, diff)
		}
	}
	if _, err := tarball.ImageFromPath(archive, ptr(name.MustParseReference("switchyard:other").(name.Tag))); err == nil {
		t.Error("the archive holds a tag it was not given")
	}
}

func ptr[T any](v T) *T { return &v }

func TestRunRejects(t *testing.T) {
	bin := staticBinary(t)
	out := filepath.Join(t.TempDir(), "image.tar")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no output", []string{"-bin", "switchyard=" + bin, "-tag", "switchyard:dev"}, "nothing to write"},
		{"no tag", []string{"-bin", "switchyard=" + bin, "-tar", out}, "no -tag"},
		{"a digest, not a tag", []string{"-bin", "switchyard=" + bin, "-tar", out, "-tag", "switchyard@sha256:" + strings.Repeat("0", 64)}, "tag"},
		{"bin without a path", []string{"-bin", "switchyard", "-tag", "switchyard:dev", "-tar", out}, "NAME=PATH"},
		{"bin name with a slash", []string{"-bin", "a/b=" + bin, "-tag", "switchyard:dev", "-tar", out}, "NAME=PATH"},
		{"missing binary", []string{"-bin", "switchyard=/nonexistent", "-tag", "switchyard:dev", "-tar", out}, "/nonexistent"},
		{"bad created", []string{"-bin", "switchyard=" + bin, "-tag", "switchyard:dev", "-tar", out, "-created", "yesterday"}, "-created"},
		{"no entrypoint binary", []string{"-bin", "yardctl=" + bin, "-tag", "switchyard:dev", "-tar", out}, "entrypoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed run left %s: %v", out, err)
	}
}

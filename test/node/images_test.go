package node

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteImageOnce reads the docker archive back as containerd's import
// would: by its tag, with the config and the one layer's files.
func TestWriteImageOnce(t *testing.T) {
	dir := t.TempDir()
	userland := filepath.Join(dir, "userland.tar")
	base, err := layerTar([]imageFile{
		{Name: "bin/", Mode: 0o755},
		{Name: "bin/bash", Mode: 0o755, Data: []byte("bash binary")},
		{Name: "bin/sh", Link: "bash"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userland, base, 0o644); err != nil {
		t.Fatal(err)
	}
	spec := agnhostSpec([]byte("agnhost binary"), userland)
	img, err := writeImageOnce(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	again, err := writeImageOnce(dir, spec)
	if err != nil || again != img {
		t.Errorf("second writeImageOnce = %+v, %v; want the same archive %+v", again, err, img)
	}
	tag, err := name.NewTag(AgnhostImage)
	if err != nil {
		t.Fatal(err)
	}
	read, err := tarball.ImageFromPath(img.Path, &tag)
	if err != nil {
		t.Fatalf("read %s as %s: %v", img.Path, AgnhostImage, err)
	}
	cfg, err := read.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/agnhost"}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"pause"}, cfg.Config.Cmd); diff != "" {
		t.Errorf("cmd (-want +got):\n%s", diff)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	layers, err := read.Layers()
	if err != nil {
		t.Fatal(err)
	}
	// The userland first, then agnhost over it.
	var got []map[string]string
	for _, l := range layers {
		got = append(got, layerFiles(t, l))
	}
	want := []map[string]string{
		{"bin/": "", "bin/bash": "bash binary", "bin/sh": "bash"},
		{"agnhost": "agnhost binary", "agnhost-2": "agnhost"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layers' files (-want +got):\n%s", diff)
	}
}

// layerFiles maps each file of l to its content, or a link's target.
func layerFiles(t *testing.T, l v1.Layer) map[string]string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(data) + h.Linkname
	}
}

func TestImportName(t *testing.T) {
	img, err := writeImageOnce(t.TempDir(), imageSpec{Ref: PauseImage, Files: []imageFile{{Name: "pause", Mode: 0o755, Data: []byte("x")}}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := img.importName()
	if err != nil {
		t.Fatal(err)
	}
	// A file name (no slash or colon) that changes with the content.
	if want := "registry.k8s.io_pause_3.10.2-"; len(n) != len(want)+12 || n[:len(want)] != want {
		t.Errorf("importName = %q, want %s<12 hex digits>", n, want)
	}
}

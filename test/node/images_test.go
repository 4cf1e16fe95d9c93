package node

import (
	"archive/tar"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteImageOnce reads the docker archive back as containerd's import
// would: by its tag, with the config and the one layer's files.
func TestWriteImageOnce(t *testing.T) {
	dir := t.TempDir()
	spec := agnhostSpec([]byte("agnhost binary"), []byte("busybox binary"))
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
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(data) + h.Linkname
	}
	for file, want := range map[string]string{
		"agnhost":     "agnhost binary",
		"agnhost-2":   "agnhost",
		"bin/busybox": "busybox binary",
		"bin/sh":      "busybox",
		"bin/nc":      "busybox",
	} {
		if got[file] != want {
			t.Errorf("layer file %s = %q, want %q", file, got[file], want)
		}
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

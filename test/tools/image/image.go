package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// binDir is where the image keeps its binaries; it is the image's PATH.
const binDir = "/usr/local/bin"

// spec is everything the image is made of: the same spec gives the same
// image digest.
type spec struct {
	// Binaries are copied to binDir under their names, mode 0755.
	Binaries []binary
	// Entrypoint names the binary the container runs.
	Entrypoint string
	// Version and Source become the OCI labels; Revision too when set.
	Version, Source, Revision string
	// Arch is the binaries' GOARCH (the OS is linux).
	Arch string
	// Created is the config's creation time and every file's mtime.
	Created time.Time
}

type binary struct {
	Name, Path string
}

// entry is one file or directory of the layer.
type entry struct {
	Name string // without a leading slash; directories end in "/"
	Mode int64
	Data []byte
}

// build makes the image from s.
func build(s spec) (v1.Image, error) {
	if !slices.ContainsFunc(s.Binaries, func(b binary) bool { return b.Name == s.Entrypoint }) {
		return nil, fmt.Errorf("entrypoint %q is not among the binaries", s.Entrypoint)
	}
	entries, err := layerEntries(s.Binaries)
	if err != nil {
		return nil, err
	}
	tarData, err := layerTar(entries, s.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarData)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: s.Created},
			CreatedBy: "test/tools/image: " + binDir + " from static binaries",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = s.Arch
	cfg.Created = v1.Time{Time: s.Created}
	labels := map[string]string{
		"org.opencontainers.image.title":   s.Entrypoint,
		"org.opencontainers.image.source":  s.Source,
		"org.opencontainers.image.version": s.Version,
	}
	if s.Revision != "" {
		labels["org.opencontainers.image.revision"] = s.Revision
	}
	cfg.Config = v1.Config{
		Entrypoint: []string{path.Join(binDir, s.Entrypoint)},
		Env:        []string{"PATH=" + binDir},
		// Root, as deploy/daemonset.yaml runs it: capabilities added for
		// another user would not be effective.
		User:       "0:0",
		WorkingDir: "/",
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// layerEntries lists the layer's content: the directories down to binDir,
// the binaries and /tmp (the Go runtime's temporary directory; the
// DaemonSet mounts an emptyDir there, as the root file system is read-only).
func layerEntries(bins []binary) ([]entry, error) {
	entries := []entry{
		{Name: "tmp/", Mode: 0o1777},
		{Name: "usr/", Mode: 0o755},
		{Name: "usr/local/", Mode: 0o755},
		{Name: "usr/local/bin/", Mode: 0o755},
	}
	for _, b := range bins {
		data, err := os.ReadFile(b.Path)
		if err != nil {
			return nil, fmt.Errorf("binary %s: %w", b.Name, err)
		}
		entries = append(entries, entry{Name: path.Join(binDir[1:], b.Name), Mode: 0o755, Data: data})
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Name, b.Name) })
	return entries, nil
}

// layerTar writes entries as a tar stream owned by root with every time set
// to mtime, in the given order.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.Name,
			Mode:    e.Mode,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.Name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer %s: %w", e.Name, err)
		}
		if _, err := w.Write(e.Data); err != nil {
			return nil, fmt.Errorf("layer %s: %w", e.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

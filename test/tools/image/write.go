package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// parseTags parses references such as switchyard:v0.1.0; each must carry a
// tag (no digest), as a docker archive records tags.
func parseTags(refs []string) ([]name.Tag, error) {
	if len(refs) == 0 {
		return nil, fmt.Errorf("no -tag given")
	}
	var tags []name.Tag
	for _, r := range refs {
		t, err := name.NewTag(r)
		if err != nil {
			return nil, fmt.Errorf("tag %q: %w", r, err)
		}
		tags = append(tags, t)
	}
	return tags, nil
}

// writeLayout replaces dir with an OCI image layout holding img once per
// tag, each manifest annotated with its tag
// (org.opencontainers.image.ref.name).
func writeLayout(dir string, img v1.Image, tags []name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("oci layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("oci layout %s: %w", dir, err)
	}
	for _, t := range tags {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": t.TagStr(),
		})); err != nil {
			return fmt.Errorf("oci layout %s: %w", dir, err)
		}
	}
	return nil
}

// writeArchive writes img as a docker-archive tarball to file (the format
// of `docker save`, which `docker load` and `ctr images import` read),
// tagged with every tag, through a temporary file so that a reader never
// sees half of it. Its entries are the config, the layers and
// manifest.json, with the tags in the order given and every time set to
// mtime. (tarball.MultiRefWriteToFile writes the same format but lists an
// image's tags in map order, so its output changes from run to run.)
func writeArchive(file string, img v1.Image, tags []name.Tag, mtime time.Time) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("docker archive: %w", err)
	}
	defer os.Remove(tmp.Name())
	werr := archive(tmp, img, tags, mtime)
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), file)
	}
	if werr != nil {
		return fmt.Errorf("docker archive %s: %w", file, werr)
	}
	return nil
}

func archive(w io.Writer, img v1.Image, tags []name.Tag, mtime time.Time) error {
	tw := tar.NewWriter(w)
	add := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}

	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	entry := archiveManifest{Config: cfgName.Hex + ".json"}
	if err := add(entry.Config, int64(len(cfg)), bytes.NewReader(cfg)); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		if err := addLayer(add, l, &entry); err != nil {
			return err
		}
	}
	for _, t := range tags {
		entry.RepoTags = append(entry.RepoTags, t.String())
	}
	m, err := json.Marshal([]archiveManifest{entry})
	if err != nil {
		return err
	}
	if err := add("manifest.json", int64(len(m)), bytes.NewReader(m)); err != nil {
		return err
	}
	return tw.Close()
}

// archiveManifest is one image of a docker archive's manifest.json.
type archiveManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func addLayer(add func(string, int64, io.Reader) error, l v1.Layer, entry *archiveManifest) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	file := d.Hex + ".tar.gz"
	entry.Layers = append(entry.Layers, file)
	return add(file, size, rc)
}

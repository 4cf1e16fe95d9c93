package node

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images e2e.test v1.36.3 runs its Services specs with, by their
// upstream names: imported so, nothing is ever pulled (imagePullPolicy
// IfNotPresent, e2e's default for tagged images).
const (
	PauseImage   = "registry.k8s.io/pause:3.10.2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// CoreDNSImage is the CoreDNS kubeadm v1.36 deploys
	// (kube-binaries.sh --coredns builds the binary).
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.14.2"
	// The images of the multi-node Conntrack and KubeProxy specs
	// (test/utils/image's configs): BusyBox runs an init container's
	// `sh -c "echo ... && sleep 15"`, distroless-iptables a hostNetwork
	// pod's `sleep 600`, `test -f /proc/net/nf_conntrack` and `cat | grep`;
	// both are stand-ins over agnhost's userland, which has those tools.
	// regression-issue-74839 is upstream's program (kube-binaries.sh
	// --agnhost builds it) over the same userland, as its Debian base.
	BusyBoxImage            = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	DistrolessIptablesImage = "registry.k8s.io/build-image/distroless-iptables:v0.9.6"
	Regression74839Image    = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.4"
)

// KubeVersion is the kubernetes release the node's binaries and images
// come from (test/tools/kube-binaries.sh's KUBE_VERSION).
const KubeVersion = "v1.36.3"

// imageFile is one file of an image's single layer.
type imageFile struct {
	Name string // without the leading slash; a directory ends in "/"
	Mode int64
	Data []byte
	Link string // a symlink's target
}

// imageSpec is an image with one layer of Files, over Base when set.
type imageSpec struct {
	Ref string
	// Base is a tar archive, the image's first layer (agnhost's userland).
	Base       string
	Files      []imageFile
	Entrypoint []string
	Cmd        []string
	User       string
}

// Image is a docker archive for the guest's containerd, with the name it
// is imported under once per disk (it carries the content's hash).
type Image struct {
	Ref  string
	Path string
}

// importName is the archive's name on the share: the reference made a
// file name, plus the archive's hash.
func (i Image) importName() (string, error) {
	h, err := hashFile(i.Path)
	if err != nil {
		return "", err
	}
	r := strings.NewReplacer("/", "_", ":", "_")
	return r.Replace(i.Ref) + "-" + h[:12], nil
}

// EnsureImages builds the images the node imports from source,
// once, into cacheDir: pause from upstream's build/pause/linux/pause.c in
// the k8s.io/kubernetes module (gcc -static); agnhost from the static
// binary kube-binaries.sh --agnhost built (kubeBin/agnhost) over userland,
// the tar test/node/userland.sh writes (upstream's image's tools from
// Debian); CoreDNS from kube-binaries.sh --coredns's kubeBin/coredns;
// BusyBox, distroless-iptables and regression-issue-74839 over the same
// userland (their constants say why).
func EnsureImages(ctx context.Context, cacheDir, kubeBin, userland string) ([]Image, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	pause, err := buildPause(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	agnhost, err := os.ReadFile(filepath.Join(kubeBin, "agnhost"))
	if err != nil {
		return nil, fmt.Errorf("node: agnhost (test/tools/kube-binaries.sh --agnhost): %w", err)
	}
	if _, err := os.Stat(userland); err != nil {
		return nil, fmt.Errorf("node: agnhost's userland (test/node/userland.sh): %w", err)
	}
	coredns, err := os.ReadFile(filepath.Join(kubeBin, "coredns"))
	if err != nil {
		return nil, fmt.Errorf("node: coredns (test/tools/kube-binaries.sh --coredns): %w", err)
	}
	regression, err := os.ReadFile(filepath.Join(kubeBin, "regression-issue-74839"))
	if err != nil {
		return nil, fmt.Errorf("node: regression-issue-74839 (test/tools/kube-binaries.sh --agnhost): %w", err)
	}
	specs := []imageSpec{
		{
			Ref:        PauseImage,
			Files:      []imageFile{{Name: "pause", Mode: 0o755, Data: pause}},
			Entrypoint: []string{"/pause"},
			User:       "65535:65535",
		},
		agnhostSpec(agnhost, userland),
		{
			Ref:        CoreDNSImage,
			Files:      []imageFile{{Name: "coredns", Mode: 0o755, Data: coredns}},
			Entrypoint: []string{"/coredns"},
		},
		{Ref: BusyBoxImage, Base: userland, Cmd: []string{"sh"}},
		{Ref: DistrolessIptablesImage, Base: userland},
		{
			Ref:        Regression74839Image,
			Base:       userland,
			Files:      []imageFile{{Name: "regression-issue-74839", Mode: 0o755, Data: regression}},
			Entrypoint: []string{"/regression-issue-74839"},
		},
	}
	var out []Image
	for _, s := range specs {
		img, err := writeImageOnce(cacheDir, s)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// agnhostSpec is upstream's agnhost image: the binary and its agnhost-2
// name over userland (which holds upstream's in-image user and group and
// /uploads).
func agnhostSpec(agnhost []byte, userland string) imageSpec {
	return imageSpec{
		Ref:  AgnhostImage,
		Base: userland,
		Files: []imageFile{
			{Name: "agnhost", Mode: 0o755, Data: agnhost},
			{Name: "agnhost-2", Link: "agnhost"},
		},
		Entrypoint: []string{"/agnhost"},
		Cmd:        []string{"pause"},
	}
}

// buildPause compiles upstream's pause.c, once per source, as pause 3.10.2
// is built (static, -Os, VERSION defined).
func buildPause(ctx context.Context, cacheDir string) ([]byte, error) {
	src, err := moduleFile(ctx, "k8s.io/kubernetes@"+KubeVersion, "build/pause/linux/pause.c")
	if err != nil {
		return nil, err
	}
	h, err := hashFile(src)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(cacheDir, "pause-"+h[:12])
	if data, err := os.ReadFile(out); err == nil {
		return data, nil
	}
	cmd := exec.CommandContext(ctx, "gcc", "-Os", "-Wall", "-Werror", "-static", "-DVERSION=v3.10.2", "-o", out+".tmp", src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("node: compile pause.c: %w: %s", err, b)
	}
	if err := exec.CommandContext(ctx, "strip", out+".tmp").Run(); err != nil {
		return nil, fmt.Errorf("node: strip pause: %w", err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return os.ReadFile(out)
}

// moduleFile returns the path of file in module mod@version in the Go
// module cache, downloading the module when it is missing.
func moduleFile(ctx context.Context, modVersion, file string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("node: go mod download %s: %w", modVersion, err)
	}
	var info struct{ Dir string }
	if err := json.Unmarshal(b, &info); err != nil || info.Dir == "" {
		return "", fmt.Errorf("node: go mod download %s: no directory in %q", modVersion, b)
	}
	return filepath.Join(info.Dir, file), nil
}

// writeImageOnce writes s as a docker archive named by a hash of its
// content, unless it exists.
func writeImageOnce(cacheDir string, s imageSpec) (Image, error) {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q %q %q\n", s.Ref, s.Entrypoint, s.Cmd, s.User)
	if s.Base != "" {
		base, err := hashFile(s.Base)
		if err != nil {
			return Image{}, err
		}
		fmt.Fprintf(h, "base %s\n", base)
	}
	for _, f := range s.Files {
		fmt.Fprintf(h, "%s %o %q %d\n", f.Name, f.Mode, f.Link, len(f.Data))
		h.Write(f.Data)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:12]
	base := strings.NewReplacer("/", "_", ":", "_").Replace(s.Ref)
	path := filepath.Join(cacheDir, base+"-"+sum+".tar")
	img := Image{Ref: s.Ref, Path: path}
	if _, err := os.Stat(path); err == nil {
		return img, nil
	}
	v1img, err := buildImage(s)
	if err != nil {
		return Image{}, err
	}
	tag, err := name.NewTag(s.Ref)
	if err != nil {
		return Image{}, fmt.Errorf("node: image name %s: %w", s.Ref, err)
	}
	if err := tarball.WriteToFile(path+".tmp", tag, v1img); err != nil {
		return Image{}, fmt.Errorf("node: write %s: %w", path, err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return Image{}, fmt.Errorf("node: %w", err)
	}
	return img, nil
}

// buildImage makes the image: Base's layer if any, then Files'. The
// layers are gzip at level 0 (stored): the guest's containerd
// decompresses them under TCG.
func buildImage(s imageSpec) (v1.Image, error) {
	data, err := layerTar(s.Files)
	if err != nil {
		return nil, err
	}
	var layers []v1.Layer
	if s.Base != "" {
		base, err := tarball.LayerFromFile(s.Base, tarball.WithCompressionLevel(gzip.NoCompression))
		if err != nil {
			return nil, fmt.Errorf("node: base layer of %s: %w", s.Ref, err)
		}
		layers = append(layers, base)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithCompressionLevel(gzip.NoCompression))
	if err != nil {
		return nil, fmt.Errorf("node: layer of %s: %w", s.Ref, err)
	}
	img, err := mutate.AppendLayers(empty.Image, append(layers, layer)...)
	if err != nil {
		return nil, fmt.Errorf("node: image %s: %w", s.Ref, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("node: image %s: %w", s.Ref, err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config = v1.Config{
		Entrypoint: s.Entrypoint,
		Cmd:        s.Cmd,
		User:       s.User,
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir: "/",
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return nil, fmt.Errorf("node: image %s: %w", s.Ref, err)
	}
	return img, nil
}

// layerTar writes files as a tar stream owned by root, times zero, sorted.
func layerTar(files []imageFile) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b imageFile) int { return strings.Compare(a.Name, b.Name) })
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Mode: f.Mode, Format: tar.FormatPAX}
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case strings.HasSuffix(f.Name, "/"):
			h.Typeflag = tar.TypeDir
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := w.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("node: layer %s: %w", f.Name, err)
		}
		if _, err := w.Write(f.Data); err != nil {
			return nil, fmt.Errorf("node: layer %s: %w", f.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("node: layer: %w", err)
	}
	return buf.Bytes(), nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("node: hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Config says where the lab's inputs and cache are. The zero value of every
// field means its default.
type Config struct {
	// CacheDir holds kernel/ (unpacked packages, filled by deps.sh) and
	// assets/ (vmlinux and base initramfs). Default: DefaultCacheDir().
	CacheDir string
	// KernelRoot is an unpacked kernel package. Default: the newest
	// complete one under CacheDir/kernel.
	KernelRoot string
	// Busybox is a statically linked busybox. Default: /bin/busybox.
	Busybox string
	// Modules are loaded at boot, in order. Default: DefaultModules.
	Modules []string
}

// Assets are the boot files for Run.
type Assets struct {
	Kernel    Kernel
	Vmlinux   string
	Initramfs string // the base archive; Run appends the job to a copy
}

// DefaultCacheDir is ${SWITCHYARD_CACHE:-$HOME/.cache/switchyard}/lab, the
// directory test/lab/deps.sh fills.
func DefaultCacheDir() string {
	base := os.Getenv("SWITCHYARD_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "switchyard")
	}
	return filepath.Join(base, "lab")
}

func (c Config) withDefaults() (Config, error) {
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir()
	}
	if c.Busybox == "" {
		c.Busybox = "/bin/busybox"
	}
	if len(c.Modules) == 0 {
		c.Modules = DefaultModules
	}
	if c.KernelRoot == "" {
		root, err := newestKernel(filepath.Join(c.CacheDir, "kernel"))
		if err != nil {
			return c, err
		}
		c.KernelRoot = root
	}
	return c, nil
}

// newestKernel returns the most recently unpacked kernel package under dir:
// deps.sh marks each complete one with a .complete file.
func newestKernel(dir string) (string, error) {
	markers, _ := filepath.Glob(filepath.Join(dir, "*", ".complete"))
	var newest string
	var newestTime time.Time
	for _, m := range markers {
		st, err := os.Stat(m)
		if err == nil && (newest == "" || st.ModTime().After(newestTime)) {
			newest, newestTime = filepath.Dir(m), st.ModTime()
		}
	}
	if newest == "" {
		return "", fmt.Errorf("no unpacked kernel under %s (run test/lab/deps.sh)", dir)
	}
	return newest, nil
}

// layoutVersion is part of the base initramfs cache key: bump it when the
// builder changes what it writes, so that cached archives are rebuilt.
const layoutVersion = "2"

// EnsureAssets returns the boot assets for cfg, building what is missing.
// Results are cached under CacheDir/assets by a hash of every input, so a
// changed kernel, busybox, module list or init script rebuilds them.
// Concurrent callers (go test runs packages in parallel) serialise on a
// lock file.
func EnsureAssets(ctx context.Context, cfg Config) (Assets, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Assets{}, err
	}
	k, err := FindKernel(cfg.KernelRoot)
	if err != nil {
		return Assets{}, err
	}
	if err := checkStatic(cfg.Busybox); err != nil {
		return Assets{}, fmt.Errorf("busybox (install busybox-static): %w", err)
	}
	dir := filepath.Join(cfg.CacheDir, "assets")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Assets{}, fmt.Errorf("create asset cache: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return Assets{}, err
	}
	defer unlock()

	kernelHash, err := fileHash(k.Image())
	if err != nil {
		return Assets{}, err
	}
	busyboxHash, err := fileHash(cfg.Busybox)
	if err != nil {
		return Assets{}, err
	}
	a := Assets{
		Kernel:  k,
		Vmlinux: filepath.Join(dir, "vmlinux-"+k.Version+"-"+kernelHash[:12]),
	}
	initKey := hashStrings(layoutVersion, k.Version, kernelHash, busyboxHash, initScript, strings.Join(cfg.Modules, ","))
	a.Initramfs = filepath.Join(dir, "initramfs-"+k.Version+"-"+initKey[:12]+".cpio")

	if err := buildOnce(a.Vmlinux, func(tmp string) error {
		return extractVmlinux(ctx, k.Image(), tmp)
	}); err != nil {
		return Assets{}, fmt.Errorf("extract vmlinux: %w", err)
	}
	if err := buildOnce(a.Initramfs, func(tmp string) error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := buildBaseInitramfs(f, k, cfg.Busybox, cfg.Modules); err != nil {
			return err
		}
		return f.Close()
	}); err != nil {
		return Assets{}, fmt.Errorf("build base initramfs: %w", err)
	}
	return a, nil
}

// buildOnce runs build into a temporary file and renames it to dst, unless
// dst exists. A crash mid-build leaves no half-written asset behind.
func buildOnce(dst string, build func(tmp string) error) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	tmp := dst + ".tmp"
	if err := build(tmp); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("store %s: %w", dst, err)
	}
	return nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open asset lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock asset cache: %w", err)
	}
	return func() { f.Close() }, nil
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

package lab

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Kernel is an unpacked Debian kernel package: a directory holding
// boot/vmlinuz-<version> and lib/modules/<version>/.
type Kernel struct {
	Root    string
	Version string
}

// FindKernel returns the kernel unpacked under root. When root holds
// several kernel versions, the last in version order wins.
func FindKernel(root string) (Kernel, error) {
	images, err := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if err != nil || len(images) == 0 {
		return Kernel{}, fmt.Errorf("no boot/vmlinuz-* under %s (run test/lab/deps.sh)", root)
	}
	slices.Sort(images)
	version := strings.TrimPrefix(filepath.Base(images[len(images)-1]), "vmlinuz-")
	k := Kernel{Root: root, Version: version}
	if _, err := os.Stat(k.ModulesDir()); err != nil {
		return Kernel{}, fmt.Errorf("kernel %s has no modules: %w", version, err)
	}
	return k, nil
}

// Image is the compressed bzImage.
func (k Kernel) Image() string { return filepath.Join(k.Root, "boot", "vmlinuz-"+k.Version) }

// ModulesDir is lib/modules/<version>.
func (k Kernel) ModulesDir() string { return filepath.Join(k.Root, "lib", "modules", k.Version) }

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}

// bzImagePayload returns the compressed kernel inside a bzImage, located by
// the boot protocol header (setup_sects, payload_offset, payload_length).
func bzImagePayload(img []byte) ([]byte, error) {
	if len(img) < 0x250 || string(img[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage: no HdrS boot header")
	}
	setupSects := int(img[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects + 1) * 512
	off := int(binary.LittleEndian.Uint32(img[0x248:]))
	n := int(binary.LittleEndian.Uint32(img[0x24c:]))
	if start+off+n > len(img) || n == 0 {
		return nil, fmt.Errorf("bzImage payload %d+%d+%d lies outside the %d-byte file", start, off, n, len(img))
	}
	return img[start+off : start+off+n], nil
}

// extractVmlinux writes the uncompressed ELF kernel of a bzImage to dst.
// Debian compresses it with xz and the x86 BCJ filter, which only the xz
// tool decodes, so it runs `xz -dc --single-stream` (the kernel build
// appends the uncompressed size after the stream).
func extractVmlinux(ctx context.Context, bzImage, dst string) error {
	img, err := os.ReadFile(bzImage)
	if err != nil {
		return fmt.Errorf("read kernel image: %w", err)
	}
	payload, err := bzImagePayload(img)
	if err != nil {
		return fmt.Errorf("%s: %w", bzImage, err)
	}
	if !bytes.HasPrefix(payload, xzMagic) {
		return fmt.Errorf("%s: payload is not xz-compressed (magic % x)", bzImage, payload[:min(6, len(payload))])
	}
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("create vmlinux: %w", err)
	}
	defer out.Close()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Stdout = out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz -d kernel payload: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("write vmlinux: %w", err)
	}
	return checkPVH(dst)
}

// checkPVH makes sure qemu can boot the ELF kernel directly: it needs the
// Xen PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY, type 18).
func checkPVH(vmlinux string) error {
	f, err := elf.Open(vmlinux)
	if err != nil {
		return fmt.Errorf("extracted vmlinux is not an ELF file: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return fmt.Errorf("read vmlinux notes: %w", err)
		}
		for len(data) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(data[0:]))
			descsz := int(binary.LittleEndian.Uint32(data[4:]))
			typ := binary.LittleEndian.Uint32(data[8:])
			name := data[12:min(len(data), 12+namesz)]
			if string(bytes.TrimRight(name, "\x00")) == "Xen" && typ == 18 {
				return nil
			}
			next := 12 + align4(namesz) + align4(descsz)
			if next > len(data) {
				break
			}
			data = data[next:]
		}
	}
	return errors.New("vmlinux has no PVH entry note (kernel built without CONFIG_PVH): qemu cannot boot it directly")
}

func align4(n int) int { return (n + 3) &^ 3 }

// checkStatic fails when path is a dynamically linked ELF executable: the
// guest has no shared libraries.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the guest has no libc (build Go with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

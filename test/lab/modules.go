package lab

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultModules are the kernel modules the base initramfs carries and the
// guest loads at boot, in load order. Their dependencies come along. The
// list covers the IPVS dataplane (the schedulers, conntrack, NAT), the
// nftables pieces for masquerade and reject, SCTP, and the links tests
// build (veth, dummy).
var DefaultModules = []string{
	// libcrc32c has only a softdep on crc32c, which busybox modprobe does
	// not follow: load an implementation first (kernel-lab.md).
	"crc32c_generic",
	"veth", "dummy",
	"nf_conntrack", "nf_nat", "nf_conntrack_netlink",
	"ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_lc", "ip_vs_wlc", "ip_vs_sh", "ip_vs_mh",
	"nf_tables", "nft_ct", "nft_nat", "nft_chain_nat", "nft_masq",
	"nft_reject", "nft_reject_inet", "nft_fib_inet",
	"sctp",
}

// moduleInfo is what the builder needs from one module's .modinfo section.
type moduleInfo struct {
	Name    string
	Path    string // in the initramfs, relative to /lib/modules/<version>
	Depends []string
	Aliases []string
}

// parseModinfo reads the NUL-separated key=value strings of a .modinfo
// section.
func parseModinfo(name, relPath string, section []byte) moduleInfo {
	mi := moduleInfo{Name: name, Path: relPath}
	for _, field := range bytes.Split(section, []byte{0}) {
		k, v, ok := strings.Cut(string(field), "=")
		if !ok {
			continue
		}
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d != "" {
					mi.Depends = append(mi.Depends, moduleName(d))
				}
			}
		case "alias":
			mi.Aliases = append(mi.Aliases, v)
		}
	}
	return mi
}

// moduleName normalises a module name the way the kernel does.
func moduleName(s string) string {
	return strings.ReplaceAll(s, "-", "_")
}

// moduleTree is the module directory of one kernel, /lib/modules/<version>.
type moduleTree struct {
	dir   string
	paths map[string]string // module name -> path relative to dir
}

// openModuleTree indexes the .ko files under dir by module name. It reads
// no module: names come from file names.
func openModuleTree(dir string) (*moduleTree, error) {
	t := &moduleTree{dir: dir, paths: map[string]string{}}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		base := d.Name()
		var name string
		switch {
		case strings.HasSuffix(base, ".ko"):
			name = strings.TrimSuffix(base, ".ko")
		case strings.HasSuffix(base, ".ko.xz"): // Debian 13 and later
			name = strings.TrimSuffix(base, ".ko.xz")
		case strings.HasSuffix(base, ".ko.zst"), strings.HasSuffix(base, ".ko.gz"):
			return fmt.Errorf("module %s: only plain and xz-compressed modules are supported", p)
		default:
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		t.paths[moduleName(name)] = filepath.ToSlash(rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("index modules in %s: %w", dir, err)
	}
	return t, nil
}

// read returns a module's ELF image and the path it gets in the
// initramfs, where it is always stored uncompressed (busybox modprobe
// loads plain .ko files).
func (t *moduleTree) read(name string) (data []byte, guestPath string, err error) {
	rel, ok := t.paths[name]
	if !ok {
		return nil, "", fmt.Errorf("module %s not found under %s", name, t.dir)
	}
	data, err = os.ReadFile(filepath.Join(t.dir, rel))
	if err != nil {
		return nil, "", fmt.Errorf("read module %s: %w", name, err)
	}
	if guestPath, ok = strings.CutSuffix(rel, ".xz"); ok {
		if data, err = unxz(data); err != nil {
			return nil, "", fmt.Errorf("decompress module %s: %w", name, err)
		}
	}
	return data, guestPath, nil
}

// unxz decompresses with the xz tool, which the lab needs anyway for the
// kernel image.
func unxz(data []byte) ([]byte, error) {
	var out, stderr bytes.Buffer
	cmd := exec.Command("xz", "-dc")
	cmd.Stdin = bytes.NewReader(data)
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("xz -dc: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}

// info reads one module's .modinfo.
func (t *moduleTree) info(name string) (moduleInfo, error) {
	data, guestPath, err := t.read(name)
	if err != nil {
		return moduleInfo{}, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return moduleInfo{}, fmt.Errorf("read module %s: %w", name, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return moduleInfo{}, fmt.Errorf("module %s has no .modinfo section", name)
	}
	section, err := sec.Data()
	if err != nil {
		return moduleInfo{}, fmt.Errorf("read .modinfo of %s: %w", name, err)
	}
	return parseModinfo(name, guestPath, section), nil
}

// closure returns the named modules and everything they depend on.
func (t *moduleTree) closure(names []string) (map[string]moduleInfo, error) {
	mods := map[string]moduleInfo{}
	queue := slices.Clone(names)
	for len(queue) > 0 {
		name := moduleName(queue[0])
		queue = queue[1:]
		if _, done := mods[name]; done {
			continue
		}
		mi, err := t.info(name)
		if err != nil {
			return nil, err
		}
		mods[name] = mi
		queue = append(queue, mi.Depends...)
	}
	return mods, nil
}

// renderModulesDep writes modules.dep for a closed set of modules, in the
// format depmod writes: each module's transitive dependencies, ordered so
// that loading them from last to first loads every dependency before the
// modules that need it.
func renderModulesDep(mods map[string]moduleInfo) (string, error) {
	var b strings.Builder
	for _, name := range sortedKeys(mods) {
		var order []string // post-order: dependencies before dependents
		state := map[string]int{}
		var visit func(n string) error
		visit = func(n string) error {
			switch state[n] {
			case 1:
				return fmt.Errorf("module dependency cycle through %s", n)
			case 2:
				return nil
			}
			state[n] = 1
			mi, ok := mods[n]
			if !ok {
				return fmt.Errorf("module %s: dependency %s is not in the set", name, n)
			}
			for _, d := range mi.Depends {
				if err := visit(d); err != nil {
					return err
				}
			}
			state[n] = 2
			order = append(order, n)
			return nil
		}
		if err := visit(name); err != nil {
			return "", err
		}
		order = order[:len(order)-1] // the module itself comes last
		slices.Reverse(order)
		fmt.Fprintf(&b, "%s:", mods[name].Path)
		for _, d := range order {
			fmt.Fprintf(&b, " %s", mods[d].Path)
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// renderModulesAlias writes modules.alias for a set of modules, so that the
// kernel's own module requests (genetlink families, schedulers, netfilter
// expressions) are served by busybox modprobe.
func renderModulesAlias(mods map[string]moduleInfo) string {
	var b strings.Builder
	for _, name := range sortedKeys(mods) {
		for _, a := range mods[name].Aliases {
			fmt.Fprintf(&b, "alias %s %s\n", a, name)
		}
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

package lab

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// GuestEnv is set to "1" in the environment of every job the guest runs.
// Guest-only tests skip unless it is set.
const GuestEnv = "SWITCHYARD_LAB"

// exitMarker starts the line the guest init writes after the job ends:
// "<exitMarker> <nonce> <code>". The nonce is removed from the guest before
// the job starts, so job output cannot forge a verdict.
const exitMarker = "SWITCHYARD_LAB_EXIT"

// initScript is /init, PID 1 of the guest. Its output and the job's go to
// /dev/ttyS1, which the host reads; the console (ttyS0) only carries kernel
// messages, kept for diagnostics.
const initScript = `#!/bin/sh
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp /run /root
mount -t tmpfs tmpfs /tmp
out=/dev/ttyS1
# Raw: no \n -> \r\n translation on the result channel.
stty -F $out raw -echo
nonce=$(cat /job/nonce)
rm -f /job/nonce
finish() {
	echo "` + exitMarker + ` $nonce $1" >$out
	sync
	poweroff -f
}
stamp() { read up idle </proc/uptime; echo "lab init: $1 at uptime ${up}s" >/dev/console; }
stamp "init started"
# One modprobe for all: it reads modules.dep once.
if ! err=$(modprobe -a $(cat /etc/lab/modules) 2>&1); then
	echo "lab init: modprobe: $err" >$out
	finish 125
fi
ip link set lo up
stamp "modules loaded"
set --
while IFS= read -r a; do set -- "$@" "$a"; done </job/args
while IFS= read -r kv; do [ -n "$kv" ] && export "$kv"; done </job/env
export ` + GuestEnv + `=1 HOME=/root TMPDIR=/tmp PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd /job
/job/bin "$@" >$out 2>&1 </dev/null
rc=$?
stamp "job exited with $rc"
finish $rc
`

// buildBaseInitramfs writes the base archive: busybox, init, the modules
// and their modules.dep/modules.alias. It returns the number of modules.
func buildBaseInitramfs(w io.Writer, k Kernel, busybox string, modules []string) (int, error) {
	return writeInitramfs(w, k, busybox, modules, initScript)
}

// WriteInitramfs writes an initramfs like the lab's base archive (a static
// busybox, the modules with their dependencies, a modules.dep and
// modules.alias for busybox modprobe, /dev/console) with init as /init
// and modules listed one per line in /etc/lab/modules. It is for guests
// that boot on to something else, such as test/node's, which mounts a disk
// and switches root; the lab's own runs use EnsureAssets.
func WriteInitramfs(w io.Writer, k Kernel, busybox string, modules []string, init string) error {
	if err := checkStatic(busybox); err != nil {
		return fmt.Errorf("busybox (install busybox-static): %w", err)
	}
	_, err := writeInitramfs(w, k, busybox, modules, init)
	return err
}

func writeInitramfs(w io.Writer, k Kernel, busybox string, modules []string, init string) (int, error) {
	tree, err := openModuleTree(k.ModulesDir())
	if err != nil {
		return 0, err
	}
	mods, err := tree.closure(modules)
	if err != nil {
		return 0, err
	}
	dep, err := renderModulesDep(mods)
	if err != nil {
		return 0, err
	}

	c := newCPIOWriter(w)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "run", "etc/lab"} {
		c.Dir(d, 0o755)
	}
	// devtmpfs is not mounted for an initramfs before /init runs, and the
	// kernel opens /dev/console for init's stdio (kernel-lab.md pitfall 9).
	c.CharDev("dev/console", 0o600, 5, 1)
	if err := addHostFile(c, busybox, "bin/busybox", 0o755); err != nil {
		return 0, err
	}
	c.Symlink("bin/sh", "busybox")
	c.File("init", 0o755, []byte(init))
	c.File("etc/lab/modules", 0o644, []byte(strings.Join(modules, "\n")+"\n"))

	modDir := filepath.ToSlash(filepath.Join("lib/modules", k.Version))
	for _, name := range sortedKeys(mods) {
		data, guestPath, err := tree.read(name)
		if err != nil {
			return 0, err
		}
		c.File(modDir+"/"+guestPath, 0o644, data)
	}
	c.File(modDir+"/modules.dep", 0o644, []byte(dep))
	c.File(modDir+"/modules.alias", 0o644, []byte(renderModulesAlias(mods)))
	return len(mods), c.Close()
}

// jobFiles is what one run adds to the base initramfs.
type jobFiles struct {
	Binary   string
	Args     []string
	Env      []string
	Nonce    string
	TestData string // host directory copied to /job/testdata; "" for none
	// Extra are host files placed at their own paths (Job.Extra), read
	// from under ExtraRoot ("/" unless a test says otherwise).
	Extra     []extraFile
	ExtraRoot string
}

// maxTestData bounds what a run copies into guest memory.
const maxTestData = 64 << 20

// writeJobArchive writes the per-run archive holding /job.
func writeJobArchive(w io.Writer, j jobFiles) error {
	for _, s := range append(append([]string{}, j.Args...), j.Env...) {
		if strings.ContainsAny(s, "\n\x00") {
			return fmt.Errorf("job argument or variable %q contains a newline or NUL", s)
		}
	}
	c := newCPIOWriter(w)
	c.Dir("job", 0o755)
	if err := addHostFile(c, j.Binary, "job/bin", 0o755); err != nil {
		return err
	}
	c.File("job/args", 0o644, []byte(lines(j.Args)))
	c.File("job/env", 0o644, []byte(lines(j.Env)))
	c.File("job/nonce", 0o600, []byte(j.Nonce+"\n"))
	if j.TestData != "" {
		if err := addTree(c, j.TestData, "job/testdata"); err != nil {
			return err
		}
	}
	root := j.ExtraRoot
	if root == "" {
		root = "/"
	}
	for _, e := range j.Extra {
		if e.Link != "" {
			c.Symlink(e.Guest, "/"+e.Link)
			continue
		}
		if err := addHostFile(c, filepath.Join(root, e.Guest), e.Guest, e.Mode); err != nil {
			return err
		}
	}
	return c.Close()
}

// addTree copies a host directory into the archive: directories, regular
// files and symlinks (kept as links), at most maxTestData bytes of files.
func addTree(c *cpioWriter, src, dst string) error {
	var total int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			c.Dir(name, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			c.Symlink(name, target)
		case d.Type().IsRegular():
			if total += info.Size(); total > maxTestData {
				return fmt.Errorf("more than %d MiB of test data", maxTestData>>20)
			}
			return addHostFile(c, p, name, info.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy %s into the job: %w", src, err)
	}
	return nil
}

func lines(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return strings.Join(ss, "\n") + "\n"
}

func addHostFile(c *cpioWriter, src, name string, perm os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("add %s to initramfs: %w", src, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("add %s to initramfs: %w", src, err)
	}
	c.FileFrom(name, perm, st.Size(), f)
	return nil
}

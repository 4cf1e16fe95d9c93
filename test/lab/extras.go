package lab

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// extraFile is one host file or symlink a job carries to the same path in
// the guest (Job.Extra).
type extraFile struct {
	Guest string      // path in the guest, unrooted ("usr/sbin/ipset")
	Link  string      // for a symlink: its target, unrooted absolute ("usr/sbin/xtables-nft-multi")
	Mode  fs.FileMode // permission bits of a regular file
}

// elfDeps is what the dynamic loader needs before a binary runs: its
// interpreter (PT_INTERP), the libraries it names (DT_NEEDED) and the
// directories it asks the loader to search first (DT_RUNPATH, or the
// older DT_RPATH), as written ($ORIGIN unexpanded).
type elfDeps struct {
	Interp  string
	Needed  []string
	RunPath []string
}

// readELFDeps reads a file's loader dependencies. A file that is not ELF
// (a script, a data file) or is statically linked has none.
type readELFDeps func(fsys fs.FS, name string) (elfDeps, error)

// libraryDirs are where the closure looks for DT_NEEDED libraries, in the
// order Debian's loader searches its system directories; the guest's
// loader finds them there without an ld.so.cache.
var libraryDirs = []string{
	"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib",
}

// extrasClosure lists what the guest needs for the host paths in extras:
// each file at its own path, each symlink as a symlink with its target
// followed, each directory with everything under it, and for every ELF
// file among them its interpreter and shared libraries, recursively (what
// ldd would list). Paths are absolute host paths; fsys is the host's root
// (os.DirFS("/")). The result is sorted by guest path.
func extrasClosure(fsys fs.FS, extras []string, deps readELFDeps) ([]extraFile, error) {
	c := closureBuilder{fsys: fsys, deps: deps, seen: map[string]bool{}}
	for _, e := range extras {
		if !path.IsAbs(e) {
			return nil, fmt.Errorf("extra %q: want an absolute host path", e)
		}
		if err := c.add(strings.TrimPrefix(path.Clean(e), "/"), 0); err != nil {
			return nil, fmt.Errorf("extra %s: %w", e, err)
		}
	}
	slices.SortFunc(c.out, func(a, b extraFile) int { return strings.Compare(a.Guest, b.Guest) })
	return c.out, nil
}

type closureBuilder struct {
	fsys fs.FS
	deps readELFDeps
	seen map[string]bool
	out  []extraFile
}

// maxLinks bounds symlink chains, as the kernel does (ELOOP).
const maxLinks = 40

// hiddenDirs are mounted over by the guest init (initScript) or hold the
// job: files placed there would not be seen.
var hiddenDirs = []string{"tmp", "proc", "sys", "dev", "job"}

func (c *closureBuilder) add(name string, links int) error {
	if c.seen[name] {
		return nil
	}
	for _, d := range hiddenDirs {
		if name == d || strings.HasPrefix(name, d+"/") {
			return fmt.Errorf("/%s: the guest mounts over /%s or uses it for the job; keep extras elsewhere", name, d)
		}
	}
	c.seen[name] = true
	st, err := fs.Lstat(c.fsys, name)
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		if links++; links > maxLinks {
			return fmt.Errorf("/%s: too many levels of symbolic links", name)
		}
		target, err := fs.ReadLink(c.fsys, name)
		if err != nil {
			return err
		}
		if !path.IsAbs(target) {
			target = path.Join("/", path.Dir(name), target)
		}
		target = strings.TrimPrefix(path.Clean(target), "/")
		c.out = append(c.out, extraFile{Guest: name, Link: target})
		return c.add(target, links)
	case st.IsDir():
		entries, err := fs.ReadDir(c.fsys, name)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := c.add(path.Join(name, e.Name()), links); err != nil {
				return err
			}
		}
		return nil
	case st.Mode().IsRegular():
		c.out = append(c.out, extraFile{Guest: name, Mode: st.Mode().Perm()})
		return c.addLibraries(name)
	default:
		return fmt.Errorf("/%s is neither a file, a directory nor a symlink", name)
	}
}

// addLibraries adds the interpreter and the shared libraries of one file.
// A library is stored under the directory the search found it in, with
// the content of the file its name resolves to.
func (c *closureBuilder) addLibraries(name string) error {
	d, err := c.deps(c.fsys, name)
	if err != nil {
		return fmt.Errorf("read ELF dependencies of /%s: %w", name, err)
	}
	if d.Interp != "" {
		if err := c.addResolved(strings.TrimPrefix(path.Clean(d.Interp), "/")); err != nil {
			return fmt.Errorf("interpreter of /%s: %w", name, err)
		}
	}
	dirs := append(runPathDirs(name, d.RunPath), libraryDirs...)
	for _, lib := range d.Needed {
		found := ""
		for _, dir := range dirs {
			if st, err := fs.Stat(c.fsys, path.Join(dir, lib)); err == nil && st.Mode().IsRegular() {
				found = path.Join(dir, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("/%s needs %s, found in none of /%s", name, lib, strings.Join(dirs, ", /"))
		}
		if err := c.addResolved(found); err != nil {
			return err
		}
	}
	return nil
}

// runPathDirs turns the run path of file name into unrooted directories
// to search, $ORIGIN being name's own directory; the guest's loader finds
// a library stored there through the same run path (Debian's FRR keeps
// libfrr.so in /usr/lib/x86_64-linux-gnu/frr, named by RUNPATH).
func runPathDirs(name string, runPath []string) []string {
	var out []string
	for _, dir := range runPath {
		dir = strings.ReplaceAll(strings.ReplaceAll(dir, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", "/"+path.Dir(name))
		if !path.IsAbs(dir) {
			continue // relative to the working directory: the loader's guess, not ours
		}
		out = append(out, strings.TrimPrefix(path.Clean(dir), "/"))
	}
	return out
}

// addResolved adds name as a regular file holding what it resolves to on
// the host, whatever symlinks lead there, and its own libraries.
func (c *closureBuilder) addResolved(name string) error {
	if c.seen[name] {
		return nil
	}
	st, err := fs.Stat(c.fsys, name)
	if err != nil {
		return err
	}
	c.seen[name] = true
	c.out = append(c.out, extraFile{Guest: name, Mode: st.Mode().Perm()})
	return c.addLibraries(name)
}

// elfDepsOf reads PT_INTERP and DT_NEEDED with debug/elf.
func elfDepsOf(fsys fs.FS, name string) (elfDeps, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return elfDeps{}, err
	}
	defer f.Close()
	ra, ok := f.(io.ReaderAt)
	if !ok {
		data, err := io.ReadAll(f)
		if err != nil {
			return elfDeps{}, err
		}
		ra = bytes.NewReader(data)
	}
	ef, err := elf.NewFile(ra)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return elfDeps{}, nil // not ELF
		}
		return elfDeps{}, err
	}
	defer ef.Close()
	var d elfDeps
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return elfDeps{}, fmt.Errorf("read PT_INTERP: %w", err)
		}
		d.Interp = string(bytes.TrimRight(b, "\x00"))
	}
	if ef.Section(".dynamic") == nil && d.Interp == "" {
		return d, nil // static
	}
	if d.Needed, err = ef.ImportedLibraries(); err != nil {
		return elfDeps{}, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	paths, err := ef.DynString(elf.DT_RUNPATH)
	if err != nil {
		return elfDeps{}, fmt.Errorf("read DT_RUNPATH: %w", err)
	}
	if len(paths) == 0 {
		if paths, err = ef.DynString(elf.DT_RPATH); err != nil {
			return elfDeps{}, fmt.Errorf("read DT_RPATH: %w", err)
		}
	}
	for _, p := range paths {
		d.RunPath = append(d.RunPath, strings.Split(p, ":")...)
	}
	return d, nil
}

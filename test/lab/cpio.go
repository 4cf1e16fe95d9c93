package lab

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// cpio file types, as stored in the mode field of a newc header.
const (
	cpioDir     = 0o040000
	cpioRegular = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

// cpioWriter writes an archive in the "newc" format the kernel unpacks into
// its initramfs. Owners are always root and times are zero, so the archive
// depends only on its content. Device nodes need no privileges: they are
// only numbers in a header.
type cpioWriter struct {
	w     *bufio.Writer
	n     int64 // bytes written so far, for alignment
	ino   uint32
	dirs  map[string]bool
	err   error
	ended bool
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), dirs: map[string]bool{}}
}

// Dir adds a directory and any missing parents.
func (c *cpioWriter) Dir(name string, perm fs.FileMode) {
	name = cleanArchivePath(name)
	if name == "" || c.dirs[name] {
		return
	}
	c.parents(name)
	c.dirs[name] = true
	c.header(name, cpioDir|uint32(perm.Perm()), 0, 0, 0)
}

// File adds a regular file with the given content.
func (c *cpioWriter) File(name string, perm fs.FileMode, data []byte) {
	c.FileFrom(name, perm, int64(len(data)), bytes.NewReader(data))
}

// FileFrom adds a regular file of size bytes read from r.
func (c *cpioWriter) FileFrom(name string, perm fs.FileMode, size int64, r io.Reader) {
	name = cleanArchivePath(name)
	c.parents(name)
	c.header(name, cpioRegular|uint32(perm.Perm()), size, 0, 0)
	if c.err != nil {
		return
	}
	n, err := io.CopyN(c.w, r, size)
	c.n += n
	if err != nil {
		c.err = fmt.Errorf("cpio: write %s: %w", name, err)
		return
	}
	c.pad(4)
}

// Symlink adds a symbolic link name pointing at target.
func (c *cpioWriter) Symlink(name, target string) {
	name = cleanArchivePath(name)
	c.parents(name)
	c.header(name, cpioSymlink|0o777, int64(len(target)), 0, 0)
	c.write([]byte(target))
	c.pad(4)
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) {
	name = cleanArchivePath(name)
	c.parents(name)
	c.header(name, cpioCharDev|uint32(perm.Perm()), 0, major, minor)
}

// Close writes the trailer and pads the archive to a 512-byte boundary, so
// that another archive can be appended to it.
func (c *cpioWriter) Close() error {
	if !c.ended {
		c.ended = true
		c.header("TRAILER!!!", 0, 0, 0, 0)
		c.pad(512)
	}
	if c.err != nil {
		return c.err
	}
	if err := c.w.Flush(); err != nil {
		return fmt.Errorf("cpio: flush: %w", err)
	}
	return nil
}

func (c *cpioWriter) parents(name string) {
	if dir := path.Dir(name); dir != "." && dir != "/" {
		c.Dir(dir, 0o755)
	}
}

func (c *cpioWriter) header(name string, mode uint32, size int64, rmajor, rminor uint32) {
	if c.err != nil {
		return
	}
	if size > 0xffffffff {
		c.err = fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, size)
		return
	}
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
	// rdevmajor, rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, uint32(size), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad(4)
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	if err != nil {
		c.err = fmt.Errorf("cpio: write: %w", err)
	}
}

func (c *cpioWriter) pad(align int64) {
	if rem := c.n % align; rem != 0 {
		c.write(make([]byte, align-rem))
	}
}

// cleanArchivePath makes an archive member name: relative, no "./", no "..".
func cleanArchivePath(name string) string {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	return name
}

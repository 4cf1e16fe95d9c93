package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// cpioEntry is one parsed newc member.
type cpioEntry struct {
	Name         string
	Mode         uint32
	Data         string
	RMajor, RMin uint32
}

// readCPIO parses concatenated newc archives the way the kernel does:
// members until TRAILER!!!, then zero padding, then the next archive.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for off < len(b) {
		if b[off] == 0 {
			off++
			continue
		}
		if off%4 != 0 {
			t.Fatalf("member at offset %d is not 4-byte aligned", off)
		}
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic %q at offset %d", b[off:off+6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		nameStart := off + 110
		name := string(b[nameStart : nameStart+int(namesize)-1])
		dataStart := align(nameStart + int(namesize))
		data := string(b[dataStart : dataStart+int(size)])
		off = align(dataStart + int(size))
		if name == "TRAILER!!!" {
			continue
		}
		out = append(out, cpioEntry{Name: name, Mode: mode, Data: data, RMajor: rmaj, RMin: rmin})
	}
	return out
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	c := newCPIOWriter(&buf)
	c.File("/etc/lab/modules", 0o644, []byte("ip_vs\n"))
	c.Symlink("bin/sh", "busybox")
	c.CharDev("dev/console", 0o600, 5, 1)
	c.Dir("etc", 0o755) // already added as a parent: not repeated
	c.File("odd", 0o755, []byte("abcde"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%512 != 0 {
		t.Errorf("archive length %d is not a multiple of 512", buf.Len())
	}
	// A second archive appended to the first is read too.
	c2 := newCPIOWriter(&buf)
	c2.File("job/args", 0o644, []byte("-test.v\n"))
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	want := []cpioEntry{
		{Name: "etc", Mode: cpioDir | 0o755},
		{Name: "etc/lab", Mode: cpioDir | 0o755},
		{Name: "etc/lab/modules", Mode: cpioRegular | 0o644, Data: "ip_vs\n"},
		{Name: "bin", Mode: cpioDir | 0o755},
		{Name: "bin/sh", Mode: cpioSymlink | 0o777, Data: "busybox"},
		{Name: "dev", Mode: cpioDir | 0o755},
		{Name: "dev/console", Mode: cpioCharDev | 0o600, RMajor: 5, RMin: 1},
		{Name: "odd", Mode: cpioRegular | 0o755, Data: "abcde"},
		{Name: "job", Mode: cpioDir | 0o755},
		{Name: "job/args", Mode: cpioRegular | 0o644, Data: "-test.v\n"},
	}
	if diff := cmp.Diff(want, readCPIO(t, buf.Bytes())); diff != "" {
		t.Errorf("archive members (-want +got):\n%s", diff)
	}
}

func TestWriteJobArchiveRejectsNewlines(t *testing.T) {
	for _, j := range []jobFiles{
		{Binary: "/dev/null", Args: []string{"a\nb"}},
		{Binary: "/dev/null", Env: []string{"K=v\x00"}},
	} {
		t.Run(fmt.Sprintf("%q", append(j.Args, j.Env...)), func(t *testing.T) {
			if err := writeJobArchive(&bytes.Buffer{}, j); err == nil {
				t.Error("writeJobArchive accepted a value that would split into two lines")
			}
		})
	}
}

func TestWriteJobArchiveTestData(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a.txt": "A", "sub/b.golden": "B"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte("ELF"), 0o755); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	j := jobFiles{Binary: bin, Args: []string{"-test.v"}, Env: []string{"K=V"}, Nonce: "n", TestData: dir}
	if err := writeJobArchive(&buf, j); err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{Name: "job", Mode: cpioDir | 0o755},
		{Name: "job/bin", Mode: cpioRegular | 0o755, Data: "ELF"},
		{Name: "job/args", Mode: cpioRegular | 0o644, Data: "-test.v\n"},
		{Name: "job/env", Mode: cpioRegular | 0o644, Data: "K=V\n"},
		{Name: "job/nonce", Mode: cpioRegular | 0o600, Data: "n\n"},
		{Name: "job/testdata", Mode: cpioDir | 0o755},
		{Name: "job/testdata/a.txt", Mode: cpioRegular | 0o644, Data: "A"},
		{Name: "job/testdata/link", Mode: cpioSymlink | 0o777, Data: "a.txt"},
		{Name: "job/testdata/sub", Mode: cpioDir | 0o755},
		{Name: "job/testdata/sub/b.golden", Mode: cpioRegular | 0o644, Data: "B"},
	}
	if diff := cmp.Diff(want, readCPIO(t, buf.Bytes())); diff != "" {
		t.Errorf("job archive (-want +got):\n%s", diff)
	}
}

package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Errors Run wraps when the guest gave no verdict. Both are failures.
var (
	// ErrTimeout: the VM ran longer than Job.Timeout and was killed.
	ErrTimeout = errors.New("lab: timeout")
	// ErrNoVerdict: the VM ended without writing the exit marker (guest
	// panic, init failure, qemu error).
	ErrNoVerdict = errors.New("lab: guest ended without an exit marker")
)

// DefaultTimeout bounds a run whose Job sets no timeout.
const DefaultTimeout = 10 * time.Minute

// Job is one program to run in a fresh VM.
type Job struct {
	Binary   string        // a statically linked executable
	Args     []string      // its arguments
	Env      []string      // KEY=VALUE pairs added to the guest environment
	MemoryMB int           // guest memory; default 256 (below ~112 the boot fails)
	Timeout  time.Duration // whole VM; default DefaultTimeout
	Output   io.Writer     // receives the job's stdout and stderr as they come; default io.Discard
	QEMU     string        // default qemu-system-x86_64 from PATH
	Console  io.Writer     // if set, receives the kernel console log after the run
	// TestData, if set, is a host directory copied to /job/testdata, the
	// guest's working directory being /job: relative testdata/ paths of a
	// Go test work unchanged. At most 64 MiB, held in guest memory.
	TestData string
	// UserNet attaches a virtio NIC on qemu's user-mode network: the guest
	// is 10.0.2.15/24 once it configures the link (the init does not), and
	// 10.0.2.2 reaches the host's loopback. The guest needs UserNetModules
	// loaded (Config.Modules).
	UserNet bool
	// Extra are host programs, libraries or directories the guest gets at
	// the same absolute paths, with what they need to run: symlinks are
	// kept and followed, directories copied whole, and every ELF file
	// brings its interpreter and shared libraries (what ldd lists). This
	// is how dynamically linked tools such as Debian's ipset and
	// iptables-nft run in the guest. Libraries a program opens at run
	// time (iptables' xtables extensions) must be listed too, by
	// directory. They are held in guest memory.
	Extra []string
}

// UserNetModules are the modules a guest with Job.UserNet needs on top of
// DefaultModules.
var UserNetModules = []string{"virtio_pci", "virtio_net"}

// Result is a run that produced a verdict.
type Result struct {
	ExitCode int           // the job's exit status inside the guest
	Elapsed  time.Duration // qemu start to verdict
}

// Run boots a VM from a, runs j.Binary as a child of the guest's init and
// returns its exit status. Any run without a verdict (timeout, missing
// marker, qemu failure) returns an error wrapping ErrTimeout or
// ErrNoVerdict, with the tail of the kernel console attached.
func Run(ctx context.Context, a Assets, j Job) (Result, error) {
	if err := checkStatic(j.Binary); err != nil {
		return Result{}, err
	}
	if j.MemoryMB == 0 {
		j.MemoryMB = 256
	}
	if j.Timeout == 0 {
		j.Timeout = DefaultTimeout
	}
	if j.Output == nil {
		j.Output = io.Discard
	}
	if j.QEMU == "" {
		j.QEMU = "qemu-system-x86_64"
	}
	tmp, err := os.MkdirTemp("", "switchyard-lab-")
	if err != nil {
		return Result{}, fmt.Errorf("lab: create run directory: %w", err)
	}
	defer os.RemoveAll(tmp)

	nonce, err := newNonce()
	if err != nil {
		return Result{}, err
	}
	extra, err := extrasClosure(os.DirFS("/"), j.Extra, elfDepsOf)
	if err != nil {
		return Result{}, fmt.Errorf("lab: extra files: %w", err)
	}
	initrd := filepath.Join(tmp, "initrd.cpio")
	if err := writeInitrd(initrd, a.Initramfs, jobFiles{Binary: j.Binary, Args: j.Args, Env: j.Env, Nonce: nonce, TestData: j.TestData, Extra: extra}); err != nil {
		return Result{}, err
	}
	console := filepath.Join(tmp, "console.log")

	ctx, cancel := context.WithTimeout(ctx, j.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, j.QEMU, qemuArgs(a.Vmlinux, initrd, console, j.MemoryMB, j.UserNet)...)
	killWithParent(cmd)
	var qemuErr bytes.Buffer
	cmd.Stderr = &qemuErr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, fmt.Errorf("lab: qemu stdout: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("lab: start %s: %w", j.QEMU, err)
	}

	code, found, copyErr := copyUntilMarker(j.Output, stdout, nonce)
	elapsed := time.Since(start)
	if found || copyErr != nil {
		// The marker is the guest's last word; it is powering off. Do not
		// wait for that. And a guest whose output can no longer be read
		// would block on it until the timeout.
		cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if j.Console != nil {
		if data, err := os.ReadFile(console); err == nil {
			j.Console.Write(data)
		}
	}
	switch {
	case found:
		return Result{ExitCode: code, Elapsed: elapsed}, nil
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return Result{}, fmt.Errorf("%w after %s%s", ErrTimeout, j.Timeout, diagnostics(console, &qemuErr))
	case ctx.Err() != nil:
		return Result{}, fmt.Errorf("lab: run stopped: %w", ctx.Err())
	case copyErr != nil:
		return Result{}, fmt.Errorf("%w: read guest output: %v%s", ErrNoVerdict, copyErr, diagnostics(console, &qemuErr))
	default:
		return Result{}, fmt.Errorf("%w (qemu: %v)%s", ErrNoVerdict, waitErr, diagnostics(console, &qemuErr))
	}
}

// qemuArgs boots vmlinux through PVH under TCG with one CPU (faster than two
// on a 2-core host). The first serial port is the kernel console, the second
// is the job's output on qemu's stdout. -no-reboot with panic=-1 turns a
// guest panic into a qemu exit. no_timer_check: on a loaded host the
// emulated timer can miss the kernel's early IO-APIC check, which then
// panics ("IO-APIC + timer doesn't work!"; seen at load 18 on 2 cores).
// userNet replaces "-nic none" with a virtio NIC on user-mode networking.
// -cpu max gives the guest every feature TCG emulates: the default qemu64
// model lacks SSE4.1 and POPCNT, which wazero's compiler needs, and the
// daemon's nodes have them.
func qemuArgs(vmlinux, initrd, console string, memMB int, userNet bool) []string {
	nic := "none"
	if userNet {
		nic = "user,model=virtio-net-pci"
	}
	return []string{
		"-accel", "tcg",
		"-cpu", "max",
		"-m", strconv.Itoa(memMB),
		"-smp", "1",
		"-kernel", vmlinux,
		"-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 quiet loglevel=3 no_timer_check",
		"-display", "none", "-vga", "none", "-nic", nic,
		"-no-reboot", "-nodefaults", "-no-user-config", "-monitor", "none",
		"-serial", "file:" + console,
		"-serial", "stdio",
	}
}

// copyUntilMarker copies guest output line by line to w until the exit
// marker with the right nonce, and returns the code it carries. Output
// without a final newline before the marker is kept.
func copyUntilMarker(w io.Writer, r io.Reader, nonce string) (code int, found bool, err error) {
	marker := exitMarker + " " + nonce + " "
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, rerr := br.ReadString('\n')
		if i := strings.Index(line, marker); i >= 0 {
			if _, err := io.WriteString(w, line[:i]); err != nil {
				return 0, false, err
			}
			code, err := strconv.Atoi(strings.TrimSpace(line[i+len(marker):]))
			if err != nil {
				return 0, false, fmt.Errorf("malformed exit marker %q", strings.TrimSpace(line[i:]))
			}
			return code, true, nil
		}
		if _, err := io.WriteString(w, line); err != nil {
			return 0, false, err
		}
		if rerr == io.EOF {
			return 0, false, nil
		}
		if rerr != nil {
			return 0, false, rerr
		}
	}
}

func writeInitrd(dst, base string, j jobFiles) error {
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("lab: create initrd: %w", err)
	}
	defer out.Close()
	in, err := os.Open(base)
	if err != nil {
		return fmt.Errorf("lab: open base initramfs: %w", err)
	}
	defer in.Close()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("lab: copy base initramfs: %w", err)
	}
	// The kernel unpacks concatenated archives in order; the base one ends
	// on a 512-byte boundary.
	if err := writeJobArchive(out, j); err != nil {
		return fmt.Errorf("lab: write job archive: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("lab: write initrd: %w", err)
	}
	return nil
}

func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lab: nonce: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// diagnostics returns qemu's stderr and the end of the kernel console.
func diagnostics(console string, qemuErr *bytes.Buffer) string {
	var b strings.Builder
	if s := strings.TrimSpace(qemuErr.String()); s != "" {
		fmt.Fprintf(&b, "\nqemu stderr:\n%s", s)
	}
	if data, err := os.ReadFile(console); err == nil && len(data) > 0 {
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "\nguest console (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

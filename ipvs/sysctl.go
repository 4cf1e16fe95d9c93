package ipvs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Sysctls reads and writes kernel parameters by their /proc/sys path, for
// example "net/ipv4/vs/conntrack". Values are trimmed of surrounding space.
type Sysctls interface {
	Get(name string) (string, error)
	Set(name, value string) error
}

// ProcSysctls is Sysctls over /proc/sys. The net/ entries belong to the
// network namespace of the thread that opens them.
type ProcSysctls struct {
	// Root defaults to /proc/sys.
	Root string
}

var _ Sysctls = ProcSysctls{}

func (p ProcSysctls) path(name string) (string, error) {
	clean := filepath.Clean(name)
	if name == "" || filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("sysctl name %q: want a relative path like net/ipv4/ip_forward", name)
	}
	root := p.Root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, clean), nil
}

func (p ProcSysctls) Get(name string) (string, error) {
	path, err := p.path(name)
	if err != nil {
		return "", fmt.Errorf("ipvs: read sysctl: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("ipvs: read sysctl %s: %w", name, sysctlErr(err))
	}
	return strings.TrimSpace(string(b)), nil
}

func (p ProcSysctls) Set(name, value string) error {
	path, err := p.path(name)
	if err != nil {
		return fmt.Errorf("ipvs: write sysctl: %w", err)
	}
	// O_WRONLY without O_CREATE: a missing parameter is an error, never a
	// new file.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("ipvs: write sysctl %s: %w", name, sysctlErr(err))
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("ipvs: write sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

func sysctlErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

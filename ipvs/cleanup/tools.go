package cleanup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// ExecTools runs programs from PATH, or from /usr/sbin and /sbin, where
// Debian keeps iptables and ipset, when PATH lacks them.
type ExecTools struct{}

var _ Tools = ExecTools{}

// Run runs name with args and stdin and returns its standard output; a
// failure carries the standard error.
func (ExecTools) Run(ctx context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	path, err := lookPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin/", "/sbin/"} {
		if p, err := exec.LookPath(dir + name); err == nil {
			return p, nil
		}
	}
	if errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
	}
	return "", err
}

//go:build !linux

package cleanup

import (
	"fmt"
	"runtime"
)

// Open fails outside Linux.
func Open() (Host, func() error, error) {
	return Host{}, nil, fmt.Errorf("cleanup: not supported on %s/%s", runtime.GOOS, runtime.GOARCH)
}

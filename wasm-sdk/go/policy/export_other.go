//go:build !wasip1

package policy

// Register makes f the module's policy; outside wasip1 it does nothing.
func Register(f Func) {}

// Log levels.
const (
	LevelDebug = 0
	LevelInfo  = 1
	LevelWarn  = 2
	LevelError = 3
)

// Log sends a line to the daemon's log; outside wasip1 it does nothing.
func Log(level uint32, msg string) {}

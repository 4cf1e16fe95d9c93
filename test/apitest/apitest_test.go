package apitest

import (
	"fmt"
	"strings"
	"testing"
)

// fatalTB records Fatalf and stops the helper by panicking, as t.Fatal
// stops a test.
type fatalTB struct {
	testing.TB
	msg string
}

type fatal struct{}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatal{})
}

func TestStartWithoutBinDirFails(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	tb := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatal); !ok {
					panic(r)
				}
			}
		}()
		Start(tb)
	}()
	if !strings.Contains(tb.msg, EnvBinDir) || !strings.Contains(tb.msg, "kube-binaries.sh") {
		t.Errorf("Start without %s: Fatalf(%q), want a message naming the variable and the script", EnvBinDir, tb.msg)
	}
}

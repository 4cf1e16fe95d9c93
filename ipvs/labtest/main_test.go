//go:build linux

package labtest

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/test/lab"
)

// topo is the guest's shared topology, built once by TestMain.
var topo *Topology

// inGuest reports whether the tests run inside the kernel lab.
func inGuest() bool { return os.Getenv(lab.GuestEnv) == "1" }

func TestMain(m *testing.M) {
	if !inGuest() {
		os.Exit(m.Run()) // every test skips itself
	}
	flag.Parse()
	// The guest has one CPU, so -parallel defaults to 1 and parallel cases
	// would wait for IPVS's counters one after the other.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "8")
	}

	start := time.Now()
	var err error
	if topo, err = NewTopology(3); err != nil {
		fmt.Fprintf(os.Stderr, "build lab topology: %v\n", err)
		os.Exit(1)
	}
	if testing.Verbose() {
		fmt.Printf("lab topology built in %s\n", time.Since(start).Round(time.Millisecond))
	}
	code := m.Run()
	topo.Close()
	os.Exit(code)
}

// requireGuest skips the test outside the kernel lab. `make test-lab` runs
// this package through labrun, where it is always set.
func requireGuest(t *testing.T) {
	t.Helper()
	if !inGuest() {
		t.Skipf("guest-only: needs IPVS in the kernel lab (%s=1); run `make test-lab`", lab.GuestEnv)
	}
}

// Package failguest holds a guest-only test that always fails. The lab's
// host-side tests run it through `go test -exec labrun` to prove that a
// failing guest test fails the run. It lives under testdata so that no
// pattern like ./... ever picks it up.
package failguest

import (
	"os"
	"testing"
)

func TestPasses(t *testing.T) {
	if os.Getenv("SWITCHYARD_LAB") != "1" {
		t.Skip("guest-only")
	}
}

func TestFailsInGuest(t *testing.T) {
	if os.Getenv("SWITCHYARD_LAB") != "1" {
		t.Skip("guest-only")
	}
	t.Error("deliberate failure inside the lab guest")
}

func TestReadsTestData(t *testing.T) {
	if os.Getenv("SWITCHYARD_LAB") != "1" {
		t.Skip("guest-only")
	}
	b, err := os.ReadFile("testdata/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "hello from the host\n"; got != want {
		t.Errorf("testdata/hello.txt = %q, want %q", got, want)
	}
}

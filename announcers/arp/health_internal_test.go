package arp

import (
	"net"
	"strings"
	"testing"
)

// TestLinkState checks the interface test of Announcers from Listen
// against the real loopback interface, which exists and is up.
func TestLinkState(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	tests := []struct {
		name    string
		index   int
		ifname  string
		wantErr string
	}{
		{name: "present and up", index: lo.Index, ifname: "lo"},
		{name: "index gone", index: 1 << 30, ifname: "eth9", wantErr: "interface eth9 (index 1073741824) is gone"},
		{name: "index now another interface", index: lo.Index, ifname: "eth9", wantErr: "is gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := linkState(tt.index, tt.ifname)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("linkState(%d, %s) = %v, want %q", tt.index, tt.ifname, err, tt.wantErr)
			}
		})
	}
}

// TestHealthyReportsGoneLinks: a link whose interface is gone makes the
// Announcer unhealthy, naming it; the others do not.
func TestHealthyReportsGoneLinks(t *testing.T) {
	a := New([]Link{{Name: "eth0", Index: 2}, {Name: "eth1", Index: 3}}, Options{})
	t.Cleanup(func() { _ = a.Close() })
	if err := a.Healthy(); err != nil {
		t.Fatalf("Healthy of links given to New = %v, want nil (their interfaces are the caller's)", err)
	}
	a.checkLink = func(index int, name string) error {
		if name == "eth1" {
			return linkState(1<<30, name)
		}
		return nil
	}
	err := a.Healthy()
	if err == nil || err.Error() != "interface eth1 (index 1073741824) is gone" {
		t.Errorf("Healthy = %v, want eth1 named as gone", err)
	}
}

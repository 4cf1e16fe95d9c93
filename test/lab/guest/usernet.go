package guest

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// Addresses qemu's user-mode network (slirp) expects: the guest is
// Addr, and Host reaches the host's loopback.
const (
	Addr = "10.0.2.15/24"
	Host = "10.0.2.2"
)

// ConfigureUserNet brings up the guest's NIC on qemu user networking
// (labrun -usernet, lab.Job.UserNet): Addr on the first non-loopback
// device, up, with the default route via Host.
func ConfigureUserNet() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	var nic netlink.Link
	for _, l := range links {
		if l.Type() == "device" && l.Attrs().Flags&net.FlagLoopback == 0 {
			nic = l
			break
		}
	}
	if nic == nil {
		return errors.New("no NIC in the guest (was the VM started with labrun -usernet?)")
	}
	addr, err := netlink.ParseAddr(Addr)
	if err != nil {
		return err
	}
	if err := netlink.AddrReplace(nic, addr); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, nic.Attrs().Name, err)
	}
	if err := netlink.LinkSetUp(nic); err != nil {
		return fmt.Errorf("bring up %s: %w", nic.Attrs().Name, err)
	}
	gw := net.ParseIP(Host)
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: nic.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route via %s: %w", gw, err)
	}
	return nil
}

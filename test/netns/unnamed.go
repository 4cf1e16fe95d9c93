package netns

import (
	"context"
	"fmt"
	"net"
	"runtime"

	vnetns "github.com/vishvananda/netns"
)

// Unnamed is a network namespace without a /run/netns entry: it lives as
// long as its handle, so nothing is left behind when the process dies. It
// is what the qemu lab guests build their topologies from; NS is the named
// kind, made with ip(8), for tests on a host.
type Unnamed struct {
	name   string // for errors only
	handle vnetns.NsHandle
}

// NewUnnamed creates an unnamed namespace; name only labels errors. The
// thread that made it is discarded, so no goroutine is left in it.
func NewUnnamed(name string) (*Unnamed, error) {
	type result struct {
		h   vnetns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		h, err := vnetns.New()
		ch <- result{h, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, r.err)
	}
	return &Unnamed{name: name, handle: r.h}, nil
}

// OpenPath opens an existing namespace by its path (a /run/netns entry
// another process made, /proc/PID/ns/net), labelled name in errors. Close
// releases only the handle: the namespace lives on while its entry does.
func OpenPath(name, path string) (*Unnamed, error) {
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s at %s: %w", name, path, err)
	}
	return &Unnamed{name: name, handle: h}, nil
}

// Handle is the namespace's file descriptor, for netlink.NewHandleAt and
// netlink.NsFd. It stays owned by u.
func (u *Unnamed) Handle() vnetns.NsHandle { return u.handle }

// Do runs fn on an OS thread inside the namespace. Sockets fn creates
// belong to the namespace and stay usable from any goroutine afterwards;
// goroutines fn starts do not run in it. The thread is discarded after fn,
// so the namespace switch cannot leak into other goroutines
// (kernel-lab.md pitfall 5).
func (u *Unnamed) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, see above
		if err := vnetns.Set(u.handle); err != nil {
			errc <- fmt.Errorf("enter namespace %s: %w", u.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Listen opens a listener inside the namespace.
func (u *Unnamed) Listen(network, addr string) (net.Listener, error) {
	return listenIn(u.Do, u.name, network, addr)
}

// DialContext connects from inside the namespace.
func (u *Unnamed) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dialIn(u.Do, ctx, network, addr)
}

// Close releases the handle; the kernel deletes the namespace once no
// process, socket or link holds it. Close is idempotent.
func (u *Unnamed) Close() {
	if u.handle >= 0 {
		u.handle.Close()
		u.handle = -1
	}
}

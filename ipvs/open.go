package ipvs

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// DrainInterval is how often a Dataplane from Open deletes drained real
// servers between Applies.
const DrainInterval = 2 * time.Second

// Open returns a Dataplane on the running host's kernel, in the calling
// thread's network namespace: IPVS over generic netlink, switchyard0 over
// route netlink, /proc/sys, ctnetlink for conntrack and nftables, each
// over one lasting connection (nftables' reopened after an error, in the
// namespace of the thread then calling). cfg's Kernel, Addresses,
// Sysctls, Conntrack and Firewall are replaced. It runs Drain every
// DrainInterval until Close, which releases the handles and leaves the
// kernel state in place.
func Open(cfg Config) (*Dataplane, error) {
	k, err := NewNetlink()
	if err != nil {
		return nil, err
	}
	a, err := NewNetlinkAddresses()
	if err != nil {
		k.Close()
		return nil, err
	}
	ct, err := NewNetlinkConntrack()
	if err != nil {
		k.Close()
		a.Close()
		return nil, err
	}
	cfg.Kernel, cfg.Addresses, cfg.Sysctls, cfg.Conntrack = k, a, ProcSysctls{}, ct
	fw := NewNFTables()
	if err := fw.connect(); err != nil { // here, in this thread's namespace
		return nil, errors.Join(err, k.Close(), a.Close(), ct.Close())
	}
	cfg.Firewall = fw
	d, err := New(cfg)
	if err != nil {
		return nil, errors.Join(err, k.Close(), a.Close(), ct.Close(), fw.Close())
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(DrainInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if err := d.Drain(); err != nil {
					d.cfg.Log.Warn("delete drained real servers", "err", err)
				}
			}
		}
	}()
	var once sync.Once
	d.close = func() error {
		var err error
		once.Do(func() {
			close(stop)
			<-done
			err = errors.Join(closeErr(k), closeErr(a), closeErr(ct), closeErr(fw))
		})
		return err
	}
	return d, nil
}

func closeErr(c io.Closer) error {
	if err := c.Close(); err != nil {
		return fmt.Errorf("ipvs: close: %w", err)
	}
	return nil
}

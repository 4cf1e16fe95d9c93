package main

import (
	"errors"
	"fmt"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// dsrSettings are the loop's dsr settings from dataplane.dsr, without the
// dataplane programming them.
func dsrSettings(d config.DSR) reconcile.DSRConfig {
	enc := model.IPIP
	if d.Encapsulation == config.EncapGUE {
		enc = model.GUE
	}
	return reconcile.DSRConfig{
		Encapsulation: enc, GUEPort: uint16(d.GUEPort), Seed: d.Seed, TableSize: d.TableSize, LinkMTU: d.MTU,
	}
}

// openDSR opens the dsr side on the running host's kernel, in the
// calling thread's network namespace (ipvs mode): IPVS and route netlink
// handles, the nftables table inet switchyard-dsr, tunl0 and a FOU port.
// Opening changes nothing in the kernel: the first dsr Service does.
// close releases the handles and leaves the kernel state in place.
func openDSR(cfg *config.Config) (_ *reconcile.DSRConfig, closeAll func() error, err error) {
	k, err := ipvs.NewNetlink()
	if err != nil {
		return nil, nil, fmt.Errorf("dsr: %w", err)
	}
	a, err := ipvs.NewNetlinkAddresses()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("dsr: %w", err), k.Close())
	}
	tun, err := ipvs.NewNetlinkDSRTunnels()
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("dsr: %w", err), k.Close(), a.Close())
	}
	closeAll = func() error { return errors.Join(k.Close(), a.Close(), tun.Close()) }
	d, err := ipvs.NewDSR(ipvs.DSRConfig{Kernel: k, Addresses: a, Sysctls: ipvs.ProcSysctls{}, Firewall: &ipvs.NFTDSR{}, Tunnels: tun})
	if err != nil {
		return nil, nil, errors.Join(err, closeAll())
	}
	dc := dsrSettings(cfg.Dataplane.DSR)
	dc.Dataplane = d
	return &dc, closeAll, nil
}

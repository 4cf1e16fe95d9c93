package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/switchyard-lb/switchyard/core/model"
)

// stage groups Diff's ops into what goes to the kernel together: binds,
// service adds and updates, real server adds, updates and drains, service
// deletions, unbinds. Each stage runs once the one before has taken
// effect.
func stage(k OpKind) int {
	switch k {
	case OpBindAddr:
		return 0
	case OpAddService, OpUpdateService:
		return 1
	case OpAddDestination, OpUpdateDestination, OpDrainDestination:
		return 2
	case OpDeleteService:
		return 3
	}
	return 4
}

// run applies ops, in Diff's order, and updates the cache: the ops of a
// stage go to the kernel together (binds or unbinds in AddAddrs or
// DelAddrs where the Addresses is an AddressBatcher, IPVS ops in
// RunCommands, several per round trip where the Kernel is a Batcher),
// each error mapped to its op. An op is skipped when its service's
// ownership could not be recorded (unrecorded), its address failed to
// bind or its service failed to be added; an address stays bound while a
// service on it failed to be deleted. A wanted service whose add fails
// with ErrExists (the kernel holds it, though the load's dump did not show
// it: see leftOut) is read with one exact get, with its real servers, and
// diffed again as one the dataplane had (its ops only those that add,
// when addOnly). It returns whether it unbound an address, and the errors.
func (d *Dataplane) run(ctx context.Context, ops []Op, unrecorded map[model.VirtualServiceKey]bool, addOnly bool) (unbinds bool, errs []error) {
	unbound, undeleted := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	unadded := map[model.VirtualServiceKey]bool{}
	skip := func(op Op) bool {
		k := op.Service.VirtualServiceKey
		switch op.Kind {
		case OpBindAddr, OpDeleteService:
			return false
		case OpUnbindAddr:
			return undeleted[op.Addr]
		}
		return unrecorded[k] || unbound[k.Addr] || unadded[k]
	}
	for len(ops) > 0 {
		if err := ctx.Err(); err != nil {
			return unbinds, append(errs, fmt.Errorf("ipvs: apply: %w", err))
		}
		n := 1
		for n < len(ops) && stage(ops[n].Kind) == stage(ops[0].Kind) {
			n++
		}
		cur := slices.DeleteFunc(slices.Clone(ops[:n]), skip)
		ops = ops[n:]
		if len(cur) == 0 {
			continue
		}
		if k := cur[0].Kind; k == OpBindAddr || k == OpUnbindAddr {
			for i, err := range d.addresses(cur) {
				op := cur[i]
				if err != nil {
					errs = append(errs, err)
					if op.Kind == OpBindAddr {
						unbound[op.Addr] = true
					}
				}
				unbinds = unbinds || op.Kind == OpUnbindAddr
			}
			continue
		}
		cmds := make([]Command, 0, len(cur))
		for _, op := range cur {
			if c, ok := command(op); ok {
				cmds = append(cmds, c)
			}
		}
		results := RunCommands(d.cfg.Kernel, cmds)
		var exists []model.VirtualServiceKey
		for _, op := range cur {
			var err error
			if _, ok := command(op); ok {
				err, results = results[0], results[1:]
			}
			k := op.Service.VirtualServiceKey
			switch {
			case op.Kind == OpDeleteService && errors.Is(err, ErrNotFound):
				err = nil
			case op.Kind == OpAddService && errors.Is(err, ErrExists):
				exists = append(exists, k)
				continue
			}
			if err != nil {
				errs = append(errs, err)
				switch op.Kind {
				case OpAddService:
					unadded[k] = true
				case OpDeleteService:
					undeleted[k.Addr] = true
				}
				continue
			}
			d.done(op)
		}
		if len(exists) > 0 {
			more, err := d.existing(exists)
			if err != nil {
				errs = append(errs, err)
			}
			if addOnly {
				more = AddOnly(more)
			}
			resolved := make(map[model.VirtualServiceKey]bool, len(exists))
			for _, k := range exists {
				if _, ok := d.have.Services[k]; !ok {
					unadded[k] = true
				}
				resolved[k] = true
			}
			// The resolved services' real servers as diffed now, in
			// place of the adds planned when they were unknown.
			ops = slices.DeleteFunc(slices.Clone(ops), func(op Op) bool {
				return stage(op.Kind) == 2 && resolved[op.Service.VirtualServiceKey]
			})
			ops = append(more, ops...)
			slices.SortStableFunc(ops, func(a, b Op) int { return stage(a.Kind) - stage(b.Kind) })
		}
	}
	return unbinds, errs
}

// existing reads the services of keys, whose adds failed with ErrExists,
// into the cache, with their real servers, and returns the ops that take
// them to what is wanted (Diff within keys).
func (d *Dataplane) existing(keys []model.VirtualServiceKey) ([]Op, error) {
	var errs []error
	var read []model.VirtualServiceKey
	for _, k := range keys {
		s, err := d.cfg.Kernel.Service(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("ipvs: add service %s: it exists, but reading it failed: %w", keyString(k), err))
			continue
		}
		dests, err := d.destinations(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("ipvs: add service %s: it exists, but reading its real servers failed: %w", keyString(k), err))
			continue
		}
		d.have.Services[k] = Entry{Service: s, Destinations: dests}
		read = append(read, k)
		d.cfg.Log.Debug("wanted virtual service found in the kernel (the dump left it out)", "service", keyString(k))
	}
	return Diff(d.want, d.have, Scope{Keys: read}), errors.Join(errs...)
}

// command is op's change to the IPVS table; none for an address op, or a
// drain of a real server already at weight 0.
func command(op Op) (Command, bool) {
	key := Service{VirtualServiceKey: op.Service.VirtualServiceKey}
	switch op.Kind {
	case OpAddService:
		return Command{Kind: CmdAddService, Service: op.Service}, true
	case OpUpdateService:
		return Command{Kind: CmdUpdateService, Service: op.Service}, true
	case OpDeleteService:
		return Command{Kind: CmdDeleteService, Service: key}, true
	case OpAddDestination:
		return Command{Kind: CmdAddDestination, Service: key, Dest: op.Dest}, true
	case OpUpdateDestination:
		return Command{Kind: CmdUpdateDestination, Service: key, Dest: op.Dest}, true
	case OpDrainDestination:
		if op.Dest.Weight != 0 {
			dest := op.Dest
			dest.Weight = 0
			return Command{Kind: CmdUpdateDestination, Service: key, Dest: dest}, true
		}
	}
	return Command{}, false
}

// addresses runs ops, all binds or all unbinds, in one batch where the
// Addresses can (AddressBatcher), updates the cache and returns one error
// per op.
func (d *Dataplane) addresses(ops []Op) []error {
	bind := ops[0].Kind == OpBindAddr
	addrs := make([]netip.Addr, len(ops))
	for i, op := range ops {
		addrs[i] = op.Addr
	}
	var errs []error
	switch b, ok := d.cfg.Addresses.(AddressBatcher); {
	case ok && bind:
		errs = b.AddAddrs(d.cfg.Dummy, addrs)
	case ok:
		errs = b.DelAddrs(d.cfg.Dummy, addrs)
	default:
		errs = make([]error, len(addrs))
		for i, a := range addrs {
			if bind {
				errs[i] = d.cfg.Addresses.AddAddr(d.cfg.Dummy, a)
			} else {
				errs[i] = d.cfg.Addresses.DelAddr(d.cfg.Dummy, a)
			}
		}
	}
	for i, a := range addrs {
		switch {
		case bind && (errs[i] == nil || errors.Is(errs[i], ErrExists)):
			errs[i] = nil
			d.have.Addrs[a] = true
		case !bind && (errs[i] == nil || errors.Is(errs[i], ErrNotFound)):
			errs[i] = nil
			delete(d.have.Addrs, a)
		}
	}
	return errs
}

// done updates the cache after op's command took effect.
func (d *Dataplane) done(op Op) {
	k := op.Service.VirtualServiceKey
	h := d.have
	switch op.Kind {
	case OpAddService:
		// Sized for the real servers wanted, which usually follow: one
		// allocation rather than one per doubling as they come.
		h.Services[k] = Entry{Service: op.Service, Destinations: make([]DestinationState, 0, len(d.want.Services[k].Destinations))}
		h.Recorded[k] = true
	case OpUpdateService:
		e := h.Services[k]
		e.Service = op.Service
		h.Services[k] = e
		h.Recorded[k] = true
	case OpDeleteService:
		delete(h.Services, k)
		delete(h.Recorded, k)
		for dk := range d.draining {
			if dk.Service == k {
				delete(d.draining, dk)
			}
		}
		if k.Protocol == model.UDP { // a firewall-mark service has none
			d.clearUDP(k, netip.Addr{})
		}
	case OpAddDestination, OpUpdateDestination:
		d.setDest(k, op.Dest)
		delete(d.draining, drainKey{k, op.Dest.DestinationKey})
		h.Recorded[k] = true
	case OpDrainDestination:
		if op.Dest.Weight != 0 {
			op.Dest.Weight = 0
			d.setDest(k, op.Dest)
		}
		dk := drainKey{k, op.Dest.DestinationKey}
		if _, ok := d.draining[dk]; !ok {
			d.draining[dk] = d.cfg.Now()
		}
	}
}

package ipvs

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// Name is the dataplane's name.
const Name = "ipvs"

// DefaultDummy is the link that holds the virtual IPs.
const DefaultDummy = "switchyard0"

// DefaultDrainTimeout bounds graceful termination: a removed real server
// is deleted after it even if connections remain.
const DefaultDrainTimeout = 15 * time.Minute

// Config wires a Dataplane to the kernel.
type Config struct {
	Kernel    Kernel
	Addresses Addresses
	Sysctls   Sysctls
	// Conntrack, when set, deletes stale UDP conntrack entries.
	Conntrack Conntrack
	// Firewall, when set, gets the masquerade spec built from the plan
	// with Local and MasqueradeAll.
	Firewall Firewall
	// Local tells this node's pods from other clients; SetLocalDetector
	// changes it.
	Local         LocalDetector
	MasqueradeAll bool
	// Dummy defaults to DefaultDummy.
	Dummy string
	// Scheduler is the default scheduler; default "rr".
	Scheduler string
	// StrictARP sets arp_ignore=1 and arp_announce=2.
	StrictARP bool
	// Timeouts are set at the first Apply (ipvsadm --set, as kube-proxy
	// does at start); a zero field leaves the kernel's value.
	Timeouts Timeouts
	// DrainTimeout bounds how long a removed real server waits for its
	// connections before it is deleted; SetDrainTimeout changes it.
	// Zero or less: DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	// Log defaults to a discarding logger.
	Log *slog.Logger
}

// drainKey is a destination waiting to be deleted.
type drainKey struct {
	Service model.VirtualServiceKey
	Dest    DestinationKey
}

// Dataplane is plugin.Dataplane over IPVS. It keeps a cache of the owned
// kernel state, read at the first Apply, on every Full update and after any
// error, and otherwise diffs only the virtual services of the changed
// Services against that cache. It is safe for concurrent use: Apply and
// Drain serialise on one mutex.
type Dataplane struct {
	cfg Config

	mu     sync.Mutex
	loaded bool // have reflects the kernel
	have   State
	// verifiedTo is the last service whose real servers a periodic
	// reload dumped because the one-pass table read did not show it
	// (load): the next reload resumes after it.
	verifiedTo model.VirtualServiceKey
	want       Desired
	// owner is the Service whose plan holds each wanted virtual service,
	// bySvc the virtual services each Service holds.
	owner map[model.VirtualServiceKey]model.ServiceKey
	bySvc map[model.ServiceKey][]model.VirtualServiceKey
	// plans are the Services' plans the desired state was derived from,
	// without error: a full update skips the Services whose plan is the
	// same (pointer) and not in Changed.
	plans    map[model.ServiceKey]*model.ServicePlan
	addrRefs map[netip.Addr]int
	draining map[drainKey]time.Time // since when
	// staleUDP are the UDP conntrack entries to delete once the Apply or
	// Drain that removed their services or backends is done: all in one
	// pass over the table (deleteStaleUDP), not one per backend.
	staleUDP []UDPFlows
	sysctls  map[string]string // as reported
	timeouts bool              // cfg.Timeouts are set
	// fw is the firewall spec of want, kept as want changes, with the
	// element changes the table has not taken yet.
	fw      fwIndex
	fwStamp string // the table's stamp, as last read or written; "" unknown
	// fwLoaded is what the last load read of the table, until the
	// Apply that loaded compared it with the spec.
	fwLoaded *FirewallState
	fwRead   bool // the table's owned keys were adopted
	// fwTrusted is set when the last load found the table untouched
	// since the cache last knew it (UntouchedFirewall), so that it did
	// not read it: the Apply updates it as after no load.
	fwTrusted bool
	close     func() error // set by Open

	// journal are the owned keys the table holds, as last read or
	// written: written before the services they name are created or
	// taken over, and removed after those are deleted.
	journal map[model.VirtualServiceKey]bool
	// marks are the internal marks of the frontends with in-cluster
	// destinations, seeded from the table at the first Apply
	// (marksRead).
	marks     marks
	marksRead bool
}

var _ plugin.AddOnlyDataplane = (*Dataplane)(nil)

// New returns a Dataplane; it touches the kernel only in Apply.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Kernel == nil || cfg.Addresses == nil || cfg.Sysctls == nil {
		return nil, errors.New("ipvs: new dataplane: Kernel, Addresses and Sysctls are required")
	}
	if err := ValidateTimeouts(cfg.Timeouts); err != nil {
		return nil, fmt.Errorf("ipvs: new dataplane: %w", err)
	}
	if err := cfg.Local.Validate(); err != nil {
		return nil, fmt.Errorf("ipvs: new dataplane: %w", err)
	}
	if cfg.Dummy == "" {
		cfg.Dummy = DefaultDummy
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = "rr"
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Dataplane{
		cfg:      cfg,
		want:     Desired{Services: map[model.VirtualServiceKey]DesiredService{}, Addrs: map[netip.Addr]bool{}},
		owner:    map[model.VirtualServiceKey]model.ServiceKey{},
		bySvc:    map[model.ServiceKey][]model.VirtualServiceKey{},
		plans:    map[model.ServiceKey]*model.ServicePlan{},
		addrRefs: map[netip.Addr]int{},
		draining: map[drainKey]time.Time{},
		journal:  map[model.VirtualServiceKey]bool{},
		marks:    newMarks(),
		fw:       newFWIndex(),
	}, nil
}

// Name returns "ipvs".
func (d *Dataplane) Name() string { return Name }

// Close releases what Open opened and leaves the kernel state in place:
// forwarding outlives the process.
func (d *Dataplane) Close() error {
	if d.close == nil {
		return nil
	}
	return d.close()
}

// SetLocalDetector replaces the detector of this node's pods (detect-local
// mode NodeCIDR follows the Node's pod CIDRs); the next Apply writes the
// table's rules again.
func (d *Dataplane) SetLocalDetector(l LocalDetector) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.Equal(d.cfg.Local) {
		return
	}
	l.CIDRs = slices.Clone(l.CIDRs)
	d.cfg.Local = l
	d.fw.rulesChanged = true
}

// Apply programs the kernel for u. Errors on single objects do not stop
// the others; they are joined, and the next Apply re-reads the kernel.
func (d *Dataplane) Apply(ctx context.Context, u plugin.Update) error {
	return d.apply(ctx, u, false)
}

// ApplyAddOnly programs what u wants and removes nothing
// (plugin.AddOnlyDataplane): of the ops an Apply would run it leaves out
// deletions, unbinds, drains and updates to weight 0, and it neither
// writes nor prunes the firewall table beyond recording the services it
// creates off the dummy link. The next Apply reads the kernel and the
// table again, as at a start, before it diffs and prunes.
func (d *Dataplane) ApplyAddOnly(ctx context.Context, u plugin.Update) error {
	u.Full = false
	return d.apply(ctx, u, true)
}

func (d *Dataplane) apply(ctx context.Context, u plugin.Update, addOnly bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ipvs: apply: %w", err)
	}
	if u.Plan == nil {
		return errors.New("ipvs: apply: update has no plan")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	start := d.cfg.Now()

	// errs leave the cache right; kernelErrs may have left it stale, so
	// the next Apply re-reads the kernel.
	var errs, kernelErrs []error
	if d.sysctls == nil {
		if err := d.ensureSysctls(); err != nil {
			errs = append(errs, err)
		}
	}
	if !d.timeouts {
		if err := d.ensureTimeouts(); err != nil {
			errs = append(errs, err)
		}
	}
	if !d.marksRead {
		// Before any mark is handed out: a restarted daemon keeps the
		// marks the table has, so that in-cluster traffic never reaches
		// another frontend's service.
		if err := d.seedMarks(); err != nil {
			return errors.Join(append(errs, err)...)
		}
	}
	scope, err := d.updateWant(u)
	if err != nil {
		errs = append(errs, err)
	}
	reloaded := u.Full || !d.loaded
	if reloaded {
		if err := d.load(d.loaded); err != nil {
			d.loaded = false
			return errors.Join(append(errs, err)...)
		}
		scope = Scope{All: true}
	}
	loaded := d.cfg.Now()
	ops := Diff(d.want, d.have, scope)
	if addOnly {
		ops = AddOnly(ops)
	}
	flushes := UDPFlushes(d.want, d.have, scope) // before the ops change d.have
	// Ownership is recorded before it is taken and dropped after it is
	// let go (see the package doc): a service whose record failed, or
	// whose address failed to bind, is not touched; an address whose
	// service failed to delete stays bound.
	unrecorded, err := d.recordIntent(ops, addOnly)
	if err != nil {
		kernelErrs = append(kernelErrs, err)
	}
	unbinds, runErrs := d.run(ctx, ops, unrecorded, addOnly) // unbinds: an address left the dummy link
	kernelErrs = append(kernelErrs, runErrs...)
	d.flushUDP(flushes)
	d.adopt(scope, unrecorded)
	programmed := d.cfg.Now()
	if addOnly {
		// The table's spec would be that of partial data: the next
		// Apply reads the table again (fwRead), compares it with the
		// whole spec and writes it then.
		d.fwRead = false
		d.cfg.Log.Debug("apply", "add-only", true, "reloaded", reloaded, "ops", len(ops),
			"want-and-read", loaded.Sub(start), "diff-and-ops", programmed.Sub(loaded))
		d.deleteStaleUDP() // the new UDP services' entries (flushUDP): removes no state of the proxy
		if len(kernelErrs) > 0 {
			d.loaded = false
		}
		return errors.Join(append(errs, kernelErrs...)...)
	}
	if err := d.syncFirewall(reloaded && !d.fwTrusted, scope, reloaded || unbinds); err != nil {
		errs = append(errs, err) // retried: the spec is not recorded
	}
	d.cfg.Log.Debug("apply", "full", u.Full, "reloaded", reloaded, "ops", len(ops),
		"want-and-read", loaded.Sub(start), "diff-and-ops", programmed.Sub(loaded), "firewall", d.cfg.Now().Sub(programmed))
	if err := d.drainLocked(); err != nil {
		kernelErrs = append(kernelErrs, err)
	}
	d.deleteStaleUDP()
	if len(kernelErrs) > 0 {
		d.loaded = false
	}
	return errors.Join(append(errs, kernelErrs...)...)
}

// ensureTimeouts sets the configured connection timeouts where the
// kernel's differ, so that a restart writes nothing.
func (d *Dataplane) ensureTimeouts() error {
	if d.cfg.Timeouts == (Timeouts{}) {
		d.timeouts = true
		return nil
	}
	cur, err := d.cfg.Kernel.Timeouts()
	if err != nil {
		return err
	}
	if want := d.cfg.Timeouts.Merge(cur); want != cur {
		if err := d.cfg.Kernel.SetTimeouts(d.cfg.Timeouts); err != nil {
			return err
		}
		d.cfg.Log.Info("set IPVS timeouts", "tcp", want.TCP, "tcpfin", want.TCPFin, "udp", want.UDP,
			"was", fmt.Sprintf("%s %s %s", cur.TCP, cur.TCPFin, cur.UDP))
	}
	d.timeouts = true
	return nil
}

// updateWant folds u into the desired state and returns the scope an
// incremental diff must cover. The plan gives each virtual service key to
// at most one Service and lists in u.Changed every Service that took or
// let go of one (core/plan arbitrates), so the changed Services let go of
// their old keys first and then take their new ones; a key another
// Service still holds is an error for the Service asking for it. A full
// update derives again every Service but those whose plan is the one
// (the same pointer: plans are immutable once planned) the desired state
// holds without error and that u.Changed does not list: a periodic
// resync costs the kernel's reading and diffing, not re-deriving what
// did not change.
func (d *Dataplane) updateWant(u plugin.Update) (Scope, error) {
	// With no stamp known the next firewall sync writes the table whole
	// (syncFirewall), or a reload comes first and flushes: the element
	// changes need not be kept.
	d.fw.whole = d.fwStamp == ""
	var scope Scope
	keys := slices.Clone(u.Changed) // the update is the caller's
	if u.Full {
		changed := make(map[model.ServiceKey]bool, len(u.Changed))
		for _, k := range u.Changed {
			changed[k] = true
		}
		same := func(k model.ServiceKey) bool {
			sp, ok := d.plans[k]
			return ok && !changed[k] && u.Plan.Services[k] == sp
		}
		for _, m := range []iter.Seq[model.ServiceKey]{maps.Keys(d.bySvc), maps.Keys(d.plans), maps.Keys(u.Plan.Services)} {
			for k := range m {
				if !same(k) {
					keys = append(keys, k)
				}
			}
		}
	}
	slices.SortFunc(keys, model.ServiceKey.Compare)
	keys = slices.Compact(keys)
	for _, sk := range keys {
		for _, vk := range d.bySvc[sk] {
			scope.Keys = append(scope.Keys, vk)
			scope.Addrs = append(scope.Addrs, vk.Addr)
			d.unwant(vk)
		}
		delete(d.bySvc, sk)
	}
	var errs []error
	for _, sk := range keys {
		sp := u.Plan.Services[sk]
		delete(d.plans, sk)
		if sp == nil {
			continue
		}
		n := len(errs)
		for _, vs := range sp.VirtualServices {
			scope.Keys = append(scope.Keys, vs.VirtualServiceKey)
			scope.Addrs = append(scope.Addrs, vs.Addr)
			if o, ok := d.owner[vs.VirtualServiceKey]; ok {
				errs = append(errs, fmt.Errorf("ipvs: service %s: virtual service %s is planned for %s too", sk, keyString(vs.VirtualServiceKey), o))
				continue
			}
			ds, err := FromModel(vs, d.cfg.Scheduler)
			if err != nil {
				errs = append(errs, fmt.Errorf("ipvs: service %s: %w", sk, err))
				continue
			}
			d.want.Services[vs.VirtualServiceKey] = ds
			d.fw.service(vs.VirtualServiceKey, ds, d.cfg.MasqueradeAll, 1)
			d.owner[vs.VirtualServiceKey] = sk
			d.bySvc[sk] = append(d.bySvc[sk], vs.VirtualServiceKey)
			if BoundKind(vs.Kind) {
				d.addrRefs[vs.Addr]++
				d.want.Addrs[vs.Addr] = true
			}
			if len(vs.Internal) > 0 {
				if err := d.wantInternal(sk, vs, &scope); err != nil {
					errs = append(errs, fmt.Errorf("ipvs: service %s: %w", sk, err))
				}
			}
		}
		if len(errs) == n {
			d.plans[sk] = sp
		}
	}
	// A frontend keeps its mark while its internal service is wanted.
	d.marks.keep(func(k model.VirtualServiceKey, m uint32) bool {
		_, ok := d.want.Services[MarkKey(m, k.Addr.Is6())]
		return ok
	})
	return scope, errors.Join(errs...)
}

// wantInternal adds the firewall-mark service of vs's in-cluster traffic
// to the desired state, under the frontend's mark.
func (d *Dataplane) wantInternal(sk model.ServiceKey, vs model.VirtualService, scope *Scope) error {
	m, ok := d.marks.get(vs.VirtualServiceKey)
	if !ok {
		return fmt.Errorf("virtual service %s: all %d internal marks are taken: in-cluster traffic gets its local endpoints only", keyString(vs.VirtualServiceKey), MaxInternalMarks)
	}
	ds, err := InternalFromModel(vs, d.cfg.Scheduler, m)
	if err != nil {
		return err
	}
	mk := ds.Service.VirtualServiceKey
	scope.Keys = append(scope.Keys, mk)
	d.want.Services[mk] = ds
	d.fw.service(mk, ds, d.cfg.MasqueradeAll, 1)
	d.owner[mk] = sk
	d.bySvc[sk] = append(d.bySvc[sk], mk)
	return nil
}

// seedMarks adopts the internal marks the firewall table holds.
func (d *Dataplane) seedMarks() error {
	if d.cfg.Firewall == nil {
		d.marksRead = true
		return nil
	}
	st, err := d.cfg.Firewall.Load()
	if err != nil {
		return fmt.Errorf("ipvs: read the internal marks: %w", err)
	}
	d.marks.seed(st.Internal)
	d.marksRead = true
	return nil
}

// syncFirewall brings the table to the desired spec, and its owned keys
// to the services owned off the dummy link, after the ops: a deleted
// service's record goes only now. After a load (reloaded) it compares the
// spec's stamp with the one the table holds, and the spec's elements
// with the ones it holds, so that an unchanged table is never rewritten,
// not even by a restarted daemon, while a table someone deleted, replaced
// or changed is. Otherwise it sends the table only the elements that
// changed since the last sync (Firewall.Update), which costs in
// proportion to them, and the whole spec only when source ranges changed
// or the table is not as known.
func (d *Dataplane) syncFirewall(reloaded bool, scope Scope, allOwned bool) error {
	if d.cfg.Firewall == nil {
		return nil
	}
	loaded := d.fwLoaded
	d.fwLoaded = nil
	stamp := d.fw.stamp(d.cfg.Local, d.cfg.MasqueradeAll)
	if !reloaded && d.fwStamp != "" && !d.fw.rulesChanged && len(d.fw.pending) > 0 {
		add, remove := d.fw.delta()
		if err := d.cfg.Firewall.Update(FirewallDelta{From: d.fwStamp, To: stamp, Add: add, Remove: remove}); err != nil {
			d.cfg.Log.Warn("nftables table not updated in place; writing it whole", "err", err)
			d.fwStamp = ""
		} else {
			d.fwStamp = stamp
			d.fw.flush()
		}
	}
	if (reloaded || d.fwStamp == "" || d.fw.rulesChanged) && (d.fwStamp != stamp || loaded != nil) {
		spec := d.fw.spec(d.cfg.Local, d.cfg.MasqueradeAll)
		if d.fwStamp != stamp || !loaded.holds(spec) {
			spec.Owned = d.ownedOffDummy()
			if err := d.cfg.Firewall.Sync(spec); err != nil {
				d.fwStamp = ""
				return err
			}
			d.synced(spec, stamp)
			return nil
		}
	}
	if reloaded || d.fwStamp == "" || d.fw.rulesChanged {
		d.fw.flush() // the table holds the spec
	}
	add, drop := d.ownedChanges(scope, allOwned)
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	if err := d.cfg.Firewall.RecordOwned(add, drop); err != nil {
		d.fwStamp = "" // the next Apply rewrites the table
		return err
	}
	for _, k := range add {
		d.journal[k] = true
	}
	for _, k := range drop {
		delete(d.journal, k)
	}
	return nil
}

// ownedChanges returns the services owned off the dummy link that the
// journal lacks, and the journal's keys no longer among them. Only the
// services of scope, and those on its addresses, can have changed,
// unless all did or an address left the dummy link.
func (d *Dataplane) ownedChanges(scope Scope, all bool) (add, drop []model.VirtualServiceKey) {
	if all || scope.All {
		return diffSorted(slices.SortedFunc(maps.Keys(d.journal), model.VirtualServiceKey.Compare), d.ownedOffDummy(), model.VirtualServiceKey.Compare)
	}
	addrs := make(map[netip.Addr]bool, len(scope.Addrs))
	for _, a := range scope.Addrs {
		addrs[a] = true
	}
	seen := map[model.VirtualServiceKey]bool{}
	check := func(k model.VirtualServiceKey) {
		if seen[k] {
			return
		}
		seen[k] = true
		owned := d.have.Recorded[k] && !d.have.Addrs[k.Addr]
		switch {
		case owned && !d.journal[k]:
			add = append(add, k)
		case !owned && d.journal[k]:
			drop = append(drop, k)
		}
	}
	for _, k := range scope.Keys {
		check(k)
	}
	for k := range d.journal {
		if addrs[k.Addr] {
			check(k)
		}
	}
	slices.SortFunc(add, model.VirtualServiceKey.Compare)
	slices.SortFunc(drop, model.VirtualServiceKey.Compare)
	return add, drop
}

// recordIntent writes to the firewall table, before any op runs, the
// services the ops create or take over and that no address on the dummy
// link will vouch for: NodePorts, and services staying on an address the
// ops unbind. It costs a transaction only when there are such services
// that the table does not hold yet. Without a table (a first start), or
// when the table refuses, it writes the whole table for the desired state
// with them, unless addOnly: that would write the spec of partial data,
// so the services wait for the next Apply then. It returns the services
// it could not record, which the ops must not touch.
func (d *Dataplane) recordIntent(ops []Op, addOnly bool) (map[model.VirtualServiceKey]bool, error) {
	if d.cfg.Firewall == nil {
		return nil, nil
	}
	need := map[model.VirtualServiceKey]bool{}
	unbinds := map[netip.Addr]bool{}
	for _, op := range ops {
		switch op.Kind {
		case OpAddService, OpUpdateService, OpAddDestination, OpUpdateDestination, OpDrainDestination:
			if k := op.Service.VirtualServiceKey; !d.want.Addrs[k.Addr] && !d.journal[k] {
				need[k] = true
			}
		case OpUnbindAddr:
			unbinds[op.Addr] = true
		}
	}
	if len(unbinds) > 0 {
		for k := range d.have.Services {
			if _, wanted := d.want.Services[k]; wanted && unbinds[k.Addr] && !d.journal[k] {
				need[k] = true
			}
		}
	}
	if len(need) == 0 {
		return nil, nil
	}
	add := slices.SortedFunc(maps.Keys(need), model.VirtualServiceKey.Compare)
	var errs []error
	if d.fwStamp != "" {
		err := d.cfg.Firewall.RecordOwned(add, nil)
		if err == nil {
			for _, k := range add {
				d.journal[k] = true
			}
			return nil, nil
		}
		errs = append(errs, err)
	}
	if addOnly {
		return need, errors.Join(errs...)
	}
	// The table is missing or not as known: write it whole, with what
	// the dataplane owns off the dummy already and what it is about to.
	spec := d.fw.spec(d.cfg.Local, d.cfg.MasqueradeAll)
	spec.Owned = applyOwned(slices.AppendSeq(d.ownedOffDummy(), maps.Keys(d.journal)), add, nil)
	if err := d.cfg.Firewall.Sync(spec); err != nil {
		d.fwStamp = ""
		return need, fmt.Errorf("ipvs: record owned services before creating them: %w", errors.Join(append(errs, err)...))
	}
	d.synced(spec, d.fw.stamp(d.cfg.Local, d.cfg.MasqueradeAll))
	return nil, nil
}

// synced records that the table holds spec, stamped stamp.
func (d *Dataplane) synced(spec FirewallSpec, stamp string) {
	d.journal = keySet(spec.Owned)
	d.fwStamp = stamp
	d.fwLoaded = nil // no longer the table's content
	d.fw.flush()
}

func keySet(keys []model.VirtualServiceKey) map[model.VirtualServiceKey]bool {
	out := make(map[model.VirtualServiceKey]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// ownedOffDummy returns the recorded services whose address is not bound
// to the dummy link: the ones only the firewall table remembers across a
// restart.
func (d *Dataplane) ownedOffDummy() []model.VirtualServiceKey {
	var out []model.VirtualServiceKey
	for k := range d.have.Recorded {
		if !d.have.Addrs[k.Addr] {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, model.VirtualServiceKey.Compare)
	return out
}

// adopt records the wanted services of scope that the kernel holds as
// the dataplane's own, so that they are deleted when no longer wanted even
// on an address other software uses (NodePorts); skip are services whose
// ownership could not be recorded, left as they were.
func (d *Dataplane) adopt(scope Scope, skip map[model.VirtualServiceKey]bool) {
	record := func(k model.VirtualServiceKey) {
		if _, ok := d.have.Services[k]; ok && !skip[k] {
			d.have.Recorded[k] = true
		}
	}
	if scope.All {
		for k := range d.want.Services {
			record(k)
		}
		return
	}
	for _, k := range scope.Keys {
		if _, ok := d.want.Services[k]; ok {
			record(k)
		}
	}
}

// unwant drops vk, which a Service holds, from the desired state.
func (d *Dataplane) unwant(vk model.VirtualServiceKey) {
	ds, ok := d.want.Services[vk]
	if ok {
		d.fw.service(vk, ds, d.cfg.MasqueradeAll, -1)
	}
	bound := BoundKind(ds.Kind) && !ds.For.Addr.IsValid() // as updateWant counted it
	delete(d.owner, vk)
	delete(d.want.Services, vk)
	if n, ok := d.addrRefs[vk.Addr]; ok && bound {
		if n <= 1 {
			delete(d.addrRefs, vk.Addr)
			delete(d.want.Addrs, vk.Addr)
		} else {
			d.addrRefs[vk.Addr] = n - 1
		}
	}
}

// load reads the kernel: the dummy link's addresses, every service, and
// the destinations of those the dataplane owns or wants (all in one pass
// where the Kernel is a TableReader). The services that pass did not
// show (ParseProcTable's exceptions, and those it skipped when other
// network namespaces hold services: see leftOut) are dumped
// one by one, unless the cache is trusted (a periodic reload after an
// Apply without kernel errors): then the cache's real servers stand for
// all but verifyPerReload of them, taken in turn from reload to reload
// (unverified), so that a change someone else made to them is still
// repaired, a few reloads later, at a bounded cost per reload.
func (d *Dataplane) load(trusted bool) error {
	_, err := retryDump(func() (struct{}, error) { return struct{}{}, d.cfg.Addresses.EnsureDummy(d.cfg.Dummy) })
	if err != nil {
		return fmt.Errorf("ipvs: load: %w", err)
	}
	bound, err := retryDump(func() ([]netip.Addr, error) { return d.cfg.Addresses.Addrs(d.cfg.Dummy) })
	if err != nil {
		return fmt.Errorf("ipvs: load: %w", err)
	}
	svcs, err := retryDump(d.cfg.Kernel.Services)
	if err != nil {
		return fmt.Errorf("ipvs: load: %w", err)
	}
	table := d.readTable()
	var fw FirewallState
	d.fwTrusted = d.firewallUntouched()
	if d.fwTrusted {
		// The table holds what the cache says (fwStamp, journal, the
		// spec with the pending element changes undone): nothing to read
		// or compare, no owned key to adopt (fwRead).
		d.fwLoaded = nil
	} else if d.cfg.Firewall != nil {
		if fw, err = d.cfg.Firewall.Load(); err != nil {
			return fmt.Errorf("ipvs: load: %w", err)
		}
		d.fwStamp = fw.Stamp
		d.journal = keySet(fw.Owned)
		d.fwLoaded = &fw
	}
	// The table's owned keys matter once, at the first load: later the
	// cache knows more (services deleted since the table was written).
	owned := map[model.VirtualServiceKey]bool{}
	if !d.fwRead {
		for _, k := range fw.Owned {
			owned[k] = true
		}
	}
	if svcs, err = d.leftOut(svcs, table, owned); err != nil {
		return fmt.Errorf("ipvs: load: %w", err)
	}
	have := State{
		Services: make(map[model.VirtualServiceKey]Entry, len(svcs)),
		Addrs:    make(map[netip.Addr]bool, len(bound)),
		Recorded: map[model.VirtualServiceKey]bool{},
	}
	for _, a := range bound {
		have.Addrs[a] = true
	}
	var unseen []model.VirtualServiceKey // wanted or owned, not in the table
	for _, s := range svcs {
		k := s.VirtualServiceKey
		_, wanted := d.want.Services[k]
		if d.have.Recorded[k] || owned[k] {
			have.Recorded[k] = true
		}
		e := Entry{Service: s}
		if wanted || have.Owns(k) {
			var read bool
			if e.Destinations, read = table[k]; !read {
				unseen = append(unseen, k)
			}
		}
		have.Services[k] = e
	}
	var cached map[model.VirtualServiceKey][]DestinationState // nil: every unseen service dumped
	if trusted {
		cached = d.unverified(unseen)
	}
	for _, k := range unseen {
		e := have.Services[k]
		var ok bool
		if e.Destinations, ok = cached[k]; !ok {
			if e.Destinations, err = d.destinations(k); err != nil {
				return fmt.Errorf("ipvs: load: %w", err)
			}
		}
		have.Services[k] = e
	}
	d.have = have
	d.loaded = true
	d.fwRead = true
	return nil
}

// verifyPerReload bounds the services load dumps one by one when the
// cache is trusted: at ~2 ms a dump in the lab's TCG guest, half a
// second per reload.
const verifyPerReload = 256

// unverified returns, of keys (the services a reload's table read did not
// show), those whose real servers the cache stands for this time, with
// them: every key the cache holds but verifyPerReload of them, the ones
// after verifiedTo in key order (wrapping around), which load dumps.
func (d *Dataplane) unverified(keys []model.VirtualServiceKey) map[model.VirtualServiceKey][]DestinationState {
	var known []model.VirtualServiceKey
	for _, k := range keys {
		if _, ok := d.have.Services[k]; ok {
			known = append(known, k)
		}
	}
	if len(known) <= verifyPerReload {
		return nil
	}
	slices.SortFunc(known, model.VirtualServiceKey.Compare)
	from, _ := slices.BinarySearchFunc(known, d.verifiedTo, func(k, to model.VirtualServiceKey) int {
		if k.Compare(to) <= 0 {
			return -1
		}
		return 1
	})
	out := make(map[model.VirtualServiceKey][]DestinationState, len(known)-verifyPerReload)
	for i, k := range known {
		if (i-from+len(known))%len(known) >= verifyPerReload {
			out[k] = d.have.Services[k].Destinations
		}
	}
	d.verifiedTo = known[(from+verifyPerReload-1)%len(known)]
	return out
}

// leftOut returns svcs, the kernel's dump of the virtual services, with
// the services of this namespace it left out that the dataplane had. Neither
// listing the kernel offers is exact when other network namespaces use
// IPVS (one table for all namespaces up to Linux 6.1 at least): the netlink
// dump resumes each part at an index that counts every namespace's
// services, so another namespace deleting services meanwhile moves it past
// some of this one's, with no NLM_F_DUMP_INTR; and /proc/net/ip_vs (table)
// advances its position over every namespace's services but restarts each
// read(2) counting only its own, so it skips some whenever other namespaces
// hold services. A service left out was unknown to the cache: once
// unwanted it was never deleted while its address left the dummy link,
// which made it foreign for good (the cluster lab's soak: three nodes'
// namespaces in one kernel deleting hundreds of Services at once). So every
// service the dataplane had (in its cache or recorded as owned, by itself
// or in the firewall table) and every one the table shows, that the dump
// lacks, is looked up on its own (Kernel.Service: an exact get, not a
// dump): a request per service the dump skipped, none at a first start. A
// wanted service the dataplane never had is not asked for: if the dump
// left it out, its add fails with ErrExists and run reads it then.
func (d *Dataplane) leftOut(svcs []Service, table map[model.VirtualServiceKey][]DestinationState, owned map[model.VirtualServiceKey]bool) ([]Service, error) {
	seen := make(map[model.VirtualServiceKey]bool, len(svcs))
	for _, s := range svcs {
		seen[s.VirtualServiceKey] = true
	}
	var ask []model.VirtualServiceKey
	for _, keys := range []iter.Seq[model.VirtualServiceKey]{maps.Keys(table), maps.Keys(d.have.Services),
		maps.Keys(d.have.Recorded), maps.Keys(d.journal), maps.Keys(owned)} {
		for k := range keys {
			if !seen[k] {
				seen[k] = true
				ask = append(ask, k)
			}
		}
	}
	slices.SortFunc(ask, model.VirtualServiceKey.Compare)
	for _, k := range ask {
		s, err := d.cfg.Kernel.Service(k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		svcs = append(svcs, s)
	}
	return svcs, nil
}

// firewallUntouched reports whether the table is known to be as the
// cache says, after a load read it once: its stamp as last written or
// read, and the Firewall sure nobody changed it since
// (UntouchedFirewall).
func (d *Dataplane) firewallUntouched() bool {
	u, ok := d.cfg.Firewall.(UntouchedFirewall)
	return ok && d.fwRead && d.fwStamp != "" && u.Untouched()
}

// readTable reads the real servers of every virtual service in one pass
// when the Kernel can (TableReader): a full resync then costs one read of
// the kernel's table rather than a dump per virtual service. Nil when it
// cannot, or the read failed: each service is dumped on its own then.
func (d *Dataplane) readTable() map[model.VirtualServiceKey][]DestinationState {
	tr, ok := d.cfg.Kernel.(TableReader)
	if !ok {
		return nil
	}
	table, err := retryDump(tr.ReadTable)
	if err != nil {
		d.cfg.Log.Debug("real servers read per virtual service", "err", err)
		return nil
	}
	return table
}

// destinations reads k's real servers, again when the dump was
// interrupted.
func (d *Dataplane) destinations(k model.VirtualServiceKey) ([]DestinationState, error) {
	return retryDump(func() ([]DestinationState, error) { return d.cfg.Kernel.Destinations(k) })
}

// setDest records a destination's weight in the cache.
func (d *Dataplane) setDest(k model.VirtualServiceKey, dst Destination) {
	e := d.have.Services[k]
	i, found := slices.BinarySearchFunc(e.Destinations, dst.DestinationKey, func(s DestinationState, k DestinationKey) int {
		return s.DestinationKey.Compare(k)
	})
	if found {
		e.Destinations[i].Weight = dst.Weight
	} else {
		e.Destinations = slices.Insert(e.Destinations, i, DestinationState{Destination: dst})
	}
	d.have.Services[k] = e
}

func (d *Dataplane) removeDest(k model.VirtualServiceKey, dk DestinationKey) {
	e, ok := d.have.Services[k]
	if !ok {
		return
	}
	e.Destinations = slices.DeleteFunc(e.Destinations, func(s DestinationState) bool { return s.DestinationKey == dk })
	d.have.Services[k] = e
}

// Drain deletes the draining real servers whose connections have ended or
// whose drain timeout has passed. Apply does it too; call Drain
// periodically between Applies so that drained servers go away promptly.
func (d *Dataplane) Drain() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.drainLocked()
	d.deleteStaleUDP()
	return err
}

// SetDrainTimeout changes Config.DrainTimeout (zero or less:
// DefaultDrainTimeout). Real servers already draining are deleted at the
// new bound, counted from when each began to drain, at the next Drain.
func (d *Dataplane) SetDrainTimeout(timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultDrainTimeout
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg.DrainTimeout = timeout
}

// Draining returns the number of real servers waiting to be deleted.
func (d *Dataplane) Draining() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.draining)
}

// drainLocked reads the connection counts of the services with draining
// destinations and deletes the ones that are done; a destination wanted
// again stops draining. TCP waits for active and inactive (TIME_WAIT,
// FIN) connections; UDP and SCTP only for active ones, as IPVS counts
// every UDP flow inactive.
func (d *Dataplane) drainLocked() error {
	if len(d.draining) == 0 {
		return nil
	}
	bySvc := map[model.VirtualServiceKey][]DestinationKey{}
	for dk := range d.draining {
		bySvc[dk.Service] = append(bySvc[dk.Service], dk.Dest)
	}
	now := d.cfg.Now()
	var errs []error
	for _, k := range slices.SortedFunc(maps.Keys(bySvc), model.VirtualServiceKey.Compare) {
		states, err := d.destinations(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("ipvs: drain: %w", err))
			continue
		}
		cur := make(map[DestinationKey]DestinationState, len(states))
		for _, s := range states {
			cur[s.DestinationKey] = s
		}
		for _, dest := range bySvc[k] {
			dk := drainKey{k, dest}
			if d.wanted(k, dest) {
				// Wanted again at the weight it drained with (0), so
				// Diff emitted no op that would have cancelled the drain.
				delete(d.draining, dk)
				continue
			}
			s, ok := cur[dest]
			if !ok {
				delete(d.draining, dk)
				d.removeDest(k, dest)
				continue
			}
			frontend := d.frontendOf(k)
			conns := s.ActiveConns
			if frontend.Protocol == model.TCP {
				conns += s.InactiveConns
			}
			if conns > 0 && now.Sub(d.draining[dk]) < d.cfg.DrainTimeout {
				continue
			}
			if err := d.cfg.Kernel.DeleteDestination(k, dest); err != nil && !errors.Is(err, ErrNotFound) {
				errs = append(errs, fmt.Errorf("ipvs: drain: %w", err))
				continue
			}
			delete(d.draining, dk)
			d.removeDest(k, dest)
			if frontend.Protocol == model.UDP {
				d.clearUDP(frontend, dest.Addr)
			}
		}
	}
	return errors.Join(errs...)
}

// frontendOf returns the frontend a wanted firewall-mark service serves,
// k itself for any other key: the address, port and protocol its
// connections have.
func (d *Dataplane) frontendOf(k model.VirtualServiceKey) model.VirtualServiceKey {
	if f := d.want.Services[k].For; f.Addr.IsValid() {
		return f
	}
	return k
}

// wanted reports whether the desired state holds dest in k.
func (d *Dataplane) wanted(k model.VirtualServiceKey, dest DestinationKey) bool {
	_, found := slices.BinarySearchFunc(d.want.Services[k].Destinations, dest, func(w Destination, k DestinationKey) int {
		return w.DestinationKey.Compare(k)
	})
	return found
}

// flushUDP deletes the conntrack entries of the UDP services that just
// got serving real servers (UDPFlushes), after the ops added them, so that
// datagrams arriving meanwhile reach the new real servers rather than
// leaving new stale entries. A service whose real servers failed to be
// added is skipped.
func (d *Dataplane) flushUDP(keys []model.VirtualServiceKey) {
	for _, k := range keys {
		if slices.ContainsFunc(d.have.Services[k].Destinations, func(s DestinationState) bool { return s.Weight > 0 }) {
			d.clearUDP(k, netip.Addr{})
		}
	}
}

// clearUDP queues the deletion of the conntrack entries of a removed UDP
// backend (or of a whole service when backend is invalid: deleted, or
// newly served) for deleteStaleUDP.
func (d *Dataplane) clearUDP(k model.VirtualServiceKey, backend netip.Addr) {
	if d.cfg.Conntrack == nil {
		return
	}
	d.staleUDP = append(d.staleUDP, UDPFlows{VIP: k.Addr, Port: k.Port, Backend: backend})
}

// deleteStaleUDP deletes the conntrack entries clearUDP queued, in one
// pass over the table: a pass reads every entry, and one per removed
// backend held the dataplane's lock for minutes in a soak's churn
// (hundreds of backends, thousands of entries), so that Drain waited and
// drained real servers stayed. A failure is logged, not returned: the
// kernel state is right, and retrying would need the removed backends
// remembered.
func (d *Dataplane) deleteStaleUDP() {
	if len(d.staleUDP) == 0 {
		return
	}
	flows := d.staleUDP
	d.staleUDP = nil
	var n uint // deletions add up over interrupted attempts
	_, err := retryDump(func() (struct{}, error) {
		m, err := d.cfg.Conntrack.DeleteUDP(flows)
		n += m
		return struct{}{}, err
	})
	if err != nil {
		d.cfg.Log.Warn("delete stale UDP conntrack entries", "services-and-backends", len(flows), "err", err)
		return
	}
	d.cfg.Log.Debug("deleted stale UDP conntrack entries", "services-and-backends", len(flows), "entries", n)
}

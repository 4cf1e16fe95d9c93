package ipvstest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/ipvs"
)

// Op names a Kernel method, for error injection.
type Op string

// The Kernel methods.
const (
	OpServices          Op = "Services"
	OpService           Op = "Service"
	OpAddService        Op = "AddService"
	OpUpdateService     Op = "UpdateService"
	OpDeleteService     Op = "DeleteService"
	OpDestinations      Op = "Destinations"
	OpReadTable         Op = "ReadTable"
	OpAddDestination    Op = "AddDestination"
	OpUpdateDestination Op = "UpdateDestination"
	OpDeleteDestination Op = "DeleteDestination"
	OpTimeouts          Op = "Timeouts"
	OpSetTimeouts       Op = "SetTimeouts"
	// OpBatch is one Batch: one round trip with the kernel. Each of its
	// commands counts as its own op too, and fails with that op's
	// injected error.
	OpBatch Op = "Batch"
)

// DefaultTimeouts are the kernel's connection timeouts after ip_vs loads.
var DefaultTimeouts = ipvs.Timeouts{TCP: 900 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}

// Entry is one virtual service of the fake's table with its destinations,
// sorted by key.
type Entry struct {
	Service      ipvs.Service
	Destinations []ipvs.DestinationState
}

// Fake is an in-memory IPVS table. The zero value is empty and ready.
type Fake struct {
	mu     sync.Mutex
	table  map[model.VirtualServiceKey]*Entry
	errors map[Op]error
	calls  map[Op]int
	// interrupt counts, per dump op, the calls still to interrupt.
	interrupt map[Op]int
	// skip and skipTable are the services the next Services dump and
	// the next ReadTable leave out.
	skip, skipTable map[model.VirtualServiceKey]bool
	// hidden are the services every ReadTable leaves out (HideInTable).
	hidden   map[model.VirtualServiceKey]bool
	timeouts *ipvs.Timeouts // nil: DefaultTimeouts
}

var (
	_ ipvs.Kernel      = (*Fake)(nil)
	_ ipvs.TableReader = (*Fake)(nil)
	_ ipvs.Batcher     = (*Fake)(nil)
)

// NewFake returns an empty table.
func NewFake() *Fake { return &Fake{} }

// SetError makes every later call of op fail with err (nil clears it)
// without changing the table.
func (f *Fake) SetError(op Op, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.errors == nil {
		f.errors = map[Op]error{}
	}
	f.errors[op] = err
}

// Interrupt makes the next n calls of op (OpServices, OpDestinations or
// OpReadTable)
// return what a dump interrupted by concurrent changes returns: the first
// half of the results and an error wrapping ipvs.ErrInterrupted.
func (f *Fake) Interrupt(op Op, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.interrupt == nil {
		f.interrupt = map[Op]int{}
	}
	f.interrupt[op] = n
}

// SkipInDump makes the next Services dump and the next ReadTable leave
// out the services of keys that the table holds, without an error: what
// the kernel's listings do when other network namespaces use IPVS (one
// table for all namespaces up to Linux 6.1 at least). The dump resumes
// each part at an index that counts every namespace's services, so
// another namespace deleting services meanwhile moves it past some of
// this one's, and it never sets NLM_F_DUMP_INTR; /proc/net/ip_vs advances
// its position over every namespace's services but restarts each read
// counting only its own, so it skips some whenever other namespaces hold
// services. Service, an exact lookup, still finds them.
func (f *Fake) SkipInDump(keys ...model.VirtualServiceKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.skip, f.skipTable = map[model.VirtualServiceKey]bool{}, map[model.VirtualServiceKey]bool{}
	for _, k := range keys {
		f.skip[k], f.skipTable[k] = true, true
	}
}

// HideInTable makes every later ReadTable leave out the services of keys
// (none: shows them again), while the Services dump still lists them:
// /proc/net/ip_vs read in a network namespace while others hold services,
// which skips the same services read after read as long as the
// namespaces' services stay put (see SkipInDump).
func (f *Fake) HideInTable(keys ...model.VirtualServiceKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hidden = map[model.VirtualServiceKey]bool{}
	for _, k := range keys {
		f.hidden[k] = true
	}
}

// interrupted consumes one interruption of op. f must be locked.
func (f *Fake) interrupted(op Op) error {
	if f.interrupt[op] <= 0 {
		return nil
	}
	f.interrupt[op]--
	return fmt.Errorf("ipvstest: %s: %w", op, ipvs.ErrInterrupted)
}

// Calls returns how often op was called, failed calls included.
func (f *Fake) Calls(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// Table returns a deep copy of the table, sorted by service key.
func (f *Fake) Table() []Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Entry, 0, len(f.table))
	for _, e := range f.table {
		out = append(out, Entry{Service: e.Service, Destinations: slices.Clone(e.Destinations)})
	}
	slices.SortFunc(out, func(a, b Entry) int { return a.Service.Compare(b.Service.VirtualServiceKey) })
	return out
}

// SetConns sets a destination's connection counts, as traffic would.
func (f *Fake) SetConns(k model.VirtualServiceKey, d ipvs.DestinationKey, active, inactive uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.table[k]
	if !ok {
		return fmt.Errorf("ipvstest: set conns: service %v: %w", k, ipvs.ErrNotFound)
	}
	i, ok := findDest(e, d)
	if !ok {
		return fmt.Errorf("ipvstest: set conns: destination %v: %w", d, ipvs.ErrNotFound)
	}
	e.Destinations[i].ActiveConns, e.Destinations[i].InactiveConns = active, inactive
	return nil
}

// SetRates sets a destination's connection and byte rates, as traffic
// would.
func (f *Fake) SetRates(k model.VirtualServiceKey, d ipvs.DestinationKey, conns, bytesIn, bytesOut uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.table[k]
	if !ok {
		return fmt.Errorf("ipvstest: set rates: service %v: %w", k, ipvs.ErrNotFound)
	}
	i, ok := findDest(e, d)
	if !ok {
		return fmt.Errorf("ipvstest: set rates: destination %v: %w", d, ipvs.ErrNotFound)
	}
	dst := &e.Destinations[i]
	dst.ConnRate, dst.BytesInRate, dst.BytesOutRate = conns, bytesIn, bytesOut
	return nil
}

// begin locks f, counts the call and returns the injected error, if any.
// It returns with f locked either way: every caller first defers the
// unlock, then calls begin.
func (f *Fake) begin(op Op) error {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[Op]int{}
	}
	if f.table == nil {
		f.table = map[model.VirtualServiceKey]*Entry{}
	}
	f.calls[op]++
	if err := f.errors[op]; err != nil {
		return fmt.Errorf("ipvstest: %s: %w", op, err)
	}
	return nil
}

func (f *Fake) Services() ([]ipvs.Service, error) {
	defer f.mu.Unlock()
	if err := f.begin(OpServices); err != nil {
		return nil, err
	}
	out := make([]ipvs.Service, 0, len(f.table))
	for k, e := range f.table {
		if !f.skip[k] {
			out = append(out, e.Service)
		}
	}
	f.skip = nil
	ipvs.SortServices(out)
	if err := f.interrupted(OpServices); err != nil {
		return out[:len(out)/2], err
	}
	return out, nil
}

// Service returns the service of k, ErrNotFound when the table has none:
// the kernel's exact lookup (a get, not a dump).
func (f *Fake) Service(k model.VirtualServiceKey) (ipvs.Service, error) {
	defer f.mu.Unlock()
	if err := f.begin(OpService); err != nil {
		return ipvs.Service{}, err
	}
	e, ok := f.table[k]
	if !ok {
		return ipvs.Service{}, fmt.Errorf("ipvstest: service %v: %w", k, ipvs.ErrNotFound)
	}
	return e.Service, nil
}

// Batch runs cmds in order with the single calls, as the kernel runs the
// requests of one message: a failed command does not stop the next. An
// error injected for OpBatch fails every command without changing the
// table, as a batch that could not be sent.
func (f *Fake) Batch(cmds []ipvs.Command) []error {
	err := f.begin(OpBatch)
	f.mu.Unlock()
	errs := make([]error, len(cmds))
	for i, c := range cmds {
		if err != nil {
			errs[i] = err
			continue
		}
		errs[i] = ipvs.RunCommand(f, c)
	}
	return errs
}

func (f *Fake) AddService(s ipvs.Service) error {
	defer f.mu.Unlock()
	if err := f.begin(OpAddService); err != nil {
		return err
	}
	if err := ipvs.ValidateService(s); err != nil {
		return fmt.Errorf("ipvstest: add service: %w", err)
	}
	if _, ok := f.table[s.VirtualServiceKey]; ok {
		return fmt.Errorf("ipvstest: add service %v: %w", s.VirtualServiceKey, ipvs.ErrExists)
	}
	f.table[s.VirtualServiceKey] = &Entry{Service: s}
	return nil
}

func (f *Fake) UpdateService(s ipvs.Service) error {
	defer f.mu.Unlock()
	if err := f.begin(OpUpdateService); err != nil {
		return err
	}
	if err := ipvs.ValidateService(s); err != nil {
		return fmt.Errorf("ipvstest: update service: %w", err)
	}
	e, ok := f.table[s.VirtualServiceKey]
	if !ok {
		return fmt.Errorf("ipvstest: update service %v: %w", s.VirtualServiceKey, ipvs.ErrNotFound)
	}
	e.Service = s
	return nil
}

func (f *Fake) DeleteService(k model.VirtualServiceKey) error {
	defer f.mu.Unlock()
	if err := f.begin(OpDeleteService); err != nil {
		return err
	}
	if _, ok := f.table[k]; !ok {
		return fmt.Errorf("ipvstest: delete service %v: %w", k, ipvs.ErrNotFound)
	}
	delete(f.table, k)
	return nil
}

func (f *Fake) Destinations(k model.VirtualServiceKey) ([]ipvs.DestinationState, error) {
	defer f.mu.Unlock()
	if err := f.begin(OpDestinations); err != nil {
		return nil, err
	}
	var out []ipvs.DestinationState
	if e, ok := f.table[k]; ok {
		out = slices.Clone(e.Destinations)
	} // else as the kernel: an empty dump
	if err := f.interrupted(OpDestinations); err != nil {
		return out[:len(out)/2], err
	}
	return out, nil
}

// ReadTable returns the destinations of the virtual services
// /proc/net/ip_vs shows as ipvs.ParseProcTable reads it: not those with a
// tunnel real server, nor firewall-mark ones without a real server.
func (f *Fake) ReadTable() (map[model.VirtualServiceKey][]ipvs.DestinationState, error) {
	defer f.mu.Unlock()
	if err := f.begin(OpReadTable); err != nil {
		return nil, err
	}
	out := map[model.VirtualServiceKey][]ipvs.DestinationState{}
	for k, e := range f.table {
		_, mark := ipvs.MarkOf(k)
		tunnel := slices.ContainsFunc(e.Destinations, func(d ipvs.DestinationState) bool { return d.Tunnel != (ipvs.Tunnel{}) })
		if !tunnel && !(mark && len(e.Destinations) == 0) && !f.skipTable[k] && !f.hidden[k] {
			out[k] = slices.Clone(e.Destinations)
		}
	}
	f.skipTable = nil
	if err := f.interrupted(OpReadTable); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *Fake) AddDestination(k model.VirtualServiceKey, d ipvs.Destination) error {
	defer f.mu.Unlock()
	e, err := f.destOp(OpAddDestination, k, d)
	if err != nil {
		return err
	}
	if _, ok := findDest(e, d.DestinationKey); ok {
		return fmt.Errorf("ipvstest: add destination %v of %v: %w", d.Addr, k, ipvs.ErrExists)
	}
	e.Destinations = append(e.Destinations, ipvs.DestinationState{Destination: d})
	ipvs.SortDestinations(e.Destinations)
	return nil
}

func (f *Fake) UpdateDestination(k model.VirtualServiceKey, d ipvs.Destination) error {
	defer f.mu.Unlock()
	e, err := f.destOp(OpUpdateDestination, k, d)
	if err != nil {
		return err
	}
	i, ok := findDest(e, d.DestinationKey)
	if !ok {
		return fmt.Errorf("ipvstest: update destination %v of %v: %w", d.Addr, k, ipvs.ErrNotFound)
	}
	e.Destinations[i].Weight, e.Destinations[i].Tunnel = d.Weight, d.Tunnel
	return nil
}

func (f *Fake) DeleteDestination(k model.VirtualServiceKey, d ipvs.DestinationKey) error {
	defer f.mu.Unlock()
	e, err := f.destOp(OpDeleteDestination, k, ipvs.Destination{DestinationKey: d})
	if err != nil {
		return err
	}
	i, ok := findDest(e, d)
	if !ok {
		return fmt.Errorf("ipvstest: delete destination %v of %v: %w", d.Addr, k, ipvs.ErrNotFound)
	}
	e.Destinations = slices.Delete(e.Destinations, i, i+1)
	return nil
}

// destOp starts a destination call: injected error, validation, service
// lookup. The caller must unlock.
func (f *Fake) destOp(op Op, k model.VirtualServiceKey, d ipvs.Destination) (*Entry, error) {
	if err := f.begin(op); err != nil {
		return nil, err
	}
	if err := ipvs.ValidateDestination(k, d); err != nil {
		return nil, fmt.Errorf("ipvstest: %s: %w", op, err)
	}
	e, ok := f.table[k]
	if !ok {
		return nil, fmt.Errorf("ipvstest: %s: service %v: %w", op, k, ipvs.ErrNotFound)
	}
	return e, nil
}

func findDest(e *Entry, d ipvs.DestinationKey) (int, bool) {
	return slices.BinarySearchFunc(e.Destinations, d, func(s ipvs.DestinationState, k ipvs.DestinationKey) int {
		return s.DestinationKey.Compare(k)
	})
}

func (f *Fake) Timeouts() (ipvs.Timeouts, error) {
	defer f.mu.Unlock()
	if err := f.begin(OpTimeouts); err != nil {
		return ipvs.Timeouts{}, err
	}
	return f.currentTimeouts(), nil
}

func (f *Fake) SetTimeouts(t ipvs.Timeouts) error {
	defer f.mu.Unlock()
	if err := f.begin(OpSetTimeouts); err != nil {
		return err
	}
	if err := ipvs.ValidateTimeouts(t); err != nil {
		return fmt.Errorf("ipvstest: set timeouts: %w", err)
	}
	t = t.Merge(f.currentTimeouts())
	f.timeouts = &t
	return nil
}

// currentTimeouts: f must be locked.
func (f *Fake) currentTimeouts() ipvs.Timeouts {
	if f.timeouts == nil {
		return DefaultTimeouts
	}
	return *f.timeouts
}

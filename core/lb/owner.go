package lb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// errClosed is the answer to a call after Close.
var errClosed = errors.New("announcer closed")

// owner is the single writer of one announcer: every call that changes
// it (the loop's Announce, a Secret's change, the nodes or node selector
// of a reload) is a command run on the owner's goroutine, one at a time,
// in the order sent. It also builds the announcer, at once or, for a
// type that NeedsNode, once the watch has reported this node.
type owner struct {
	name string
	typ  Type
	ac   config.Announcer
	env  Env
	// nodes returns the ready nodes the announcer's node selector picks,
	// and this node; read when a nodes command runs, so that the last
	// one run always sees the latest nodes and selector.
	nodes func() (selected []*model.Node, self *model.Node)
	// built is called on the owner's goroutine once the announcer runs.
	built func(*owner, *Instance)

	cmds chan func(context.Context)
	ctx  context.Context // ends at close
	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex
	inst     *Instance // nil until built
	buildErr error     // why the announcer is not built
}

func newOwner(name string, typ Type, ac config.Announcer, env Env) *owner {
	ctx, stop := context.WithCancel(context.Background())
	o := &owner{
		name: name, typ: typ, ac: ac, env: env,
		cmds: make(chan func(context.Context), 16),
		ctx:  ctx, stop: stop, done: make(chan struct{}),
	}
	if typ.NeedsNode {
		o.buildErr = fmt.Errorf("waiting for the watch to report node %s", env.NodeName)
	}
	return o
}

// start starts the owner's goroutine.
func (o *owner) start() { go o.run() }

func (o *owner) run() {
	defer close(o.done)
	for {
		select {
		case <-o.ctx.Done():
			return
		case f := <-o.cmds:
			f(o.ctx)
		}
	}
}

// post queues f; false once the owner is closed.
func (o *owner) post(f func(context.Context)) bool {
	select {
	case o.cmds <- f:
		return true
	case <-o.ctx.Done():
		return false
	}
}

// do runs f on the owner's goroutine and returns its error; it gives up
// waiting when ctx ends (f still runs, with ctx).
func (o *owner) do(ctx context.Context, f func(context.Context) error) error {
	res := make(chan error, 1)
	if !o.post(func(context.Context) { res <- f(ctx) }) {
		return fmt.Errorf("announcer %s: %w", o.name, errClosed)
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-o.done:
		return fmt.Errorf("announcer %s: %w", o.name, errClosed)
	}
}

// build runs the type's New; on the owner's goroutine, or before it
// gets any command.
func (o *owner) build(ctx context.Context, self *model.Node) error {
	env := o.env
	env.Self = self
	inst, err := o.typ.New(ctx, env, o.ac)
	o.mu.Lock()
	if err != nil {
		o.buildErr = err
		o.mu.Unlock()
		return err
	}
	o.inst, o.buildErr = inst, nil
	o.mu.Unlock()
	if o.built != nil {
		o.built(o, inst)
	}
	return nil
}

// instance returns the running announcer and, while there is none, why.
func (o *owner) instance() (*Instance, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.inst, o.buildErr
}

// nodesChanged is the command a change of the nodes or of the node
// selector sends: it builds an announcer waiting for this node and
// passes the selected nodes on.
func (o *owner) nodesChanged(ctx context.Context) {
	selected, self := o.nodes()
	inst, _ := o.instance()
	if inst == nil && o.typ.NeedsNode && self != nil {
		if err := o.build(ctx, self); err != nil {
			o.env.Log.Error("announcer not started; tried again at the next change of the nodes", "announcer", o.name, "err", err)
			return
		}
		inst, _ = o.instance()
	}
	if inst == nil || inst.SetNodes == nil {
		return
	}
	if err := inst.SetNodes(selected); err != nil {
		o.env.Log.Warn("announcer: set nodes", "announcer", o.name, "err", err)
	}
}

// probe is the owner's part of /readyz.
func (o *owner) probe() error {
	inst, err := o.instance()
	switch {
	case inst == nil:
		return err
	case inst.Probe == nil:
		return nil
	}
	return inst.Probe()
}

// grace is how long probe may fail before the pod turns unready.
func (o *owner) grace() time.Duration {
	if inst, _ := o.instance(); inst != nil {
		return inst.Grace
	}
	return o.typ.Grace
}

// close closes the announcer on the owner's goroutine, after the
// commands queued before, and ends the goroutine; for a restart with the
// announcer's Restart when it has one.
func (o *owner) close(restart bool) error {
	res := make(chan error, 1)
	if !o.post(func(context.Context) {
		inst, _ := o.instance()
		switch {
		case inst == nil:
			res <- nil
		case restart && inst.Restart != nil:
			res <- inst.Restart()
		default:
			res <- inst.Announcer.Close()
		}
	}) {
		return nil
	}
	err := <-res
	o.stop()
	<-o.done
	return err
}

// proxy is the announcer the loop sees: every call goes through the
// owner.
type proxy struct{ o *owner }

var (
	_ plugin.Announcer      = proxy{}
	_ plugin.HealthReporter = proxy{}
)

// Name is the announcer's name in the config.
func (p proxy) Name() string { return p.o.name }

// Announce passes set to the announcer on its owner's goroutine.
func (p proxy) Announce(ctx context.Context, set []model.Announcement) error {
	return p.o.do(ctx, func(ctx context.Context) error {
		inst, err := p.o.instance()
		if inst == nil {
			return fmt.Errorf("announcer %s: %w", p.o.name, err)
		}
		return inst.Announcer.Announce(ctx, set)
	})
}

// Close is the Manager's: the loop never closes an announcer.
func (p proxy) Close() error { return nil }

// Healthy is the announcer's readiness probe.
func (p proxy) Healthy() error { return p.o.probe() }

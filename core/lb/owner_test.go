package lb

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/model"
)

// serialAnnouncer fails the test when two of its calls overlap: the
// owner must be its single writer.
type serialAnnouncer struct {
	t        *testing.T
	inFlight atomic.Int32
	mu       sync.Mutex
	calls    []string
}

func (a *serialAnnouncer) enter(call string) func() {
	if n := a.inFlight.Add(1); n != 1 {
		a.t.Errorf("%s runs beside %d other calls", call, n-1)
	}
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
	return func() { a.inFlight.Add(-1) }
}

func (a *serialAnnouncer) Name() string { return "serial" }

func (a *serialAnnouncer) Announce(context.Context, []model.Announcement) error {
	defer a.enter("announce")()
	return nil
}

func (a *serialAnnouncer) Close() error {
	defer a.enter("close")()
	return nil
}

func (a *serialAnnouncer) count(call string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.calls {
		if c == call {
			n++
		}
	}
	return n
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestOwnerSerialisesWriters calls an announcer from the loop (Announce),
// a Secret's watch (Follow) and node changes at once: the owner runs the
// calls one at a time, every one of them, and Close last.
func TestOwnerSerialisesWriters(t *testing.T) {
	a := &serialAnnouncer{t: t}
	inst := &Instance{Announcer: a}
	inst.SetNodes = func([]*model.Node) error { defer a.enter("nodes")(); return nil }
	inst.Follow = []Follow{{Name: "s", Apply: func(context.Context, *corev1.Secret) { defer a.enter("secret")() }}}
	typ := Type{New: func(context.Context, Env, config.Announcer) (*Instance, error) { return inst, nil }}
	o := newOwner("tor", typ, config.Announcer{Name: "tor"}, Env{NodeName: "n1", Log: discard()})
	o.nodes = func() ([]*model.Node, *model.Node) { return nil, nil }
	o.start()
	if err := o.build(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			if err := (proxy{o}).Announce(t.Context(), nil); err != nil {
				t.Errorf("Announce: %v", err)
			}
		}
	})
	wg.Go(func() {
		for range n {
			o.post(func(ctx context.Context) { inst.Follow[0].Apply(ctx, nil) })
		}
	})
	wg.Go(func() {
		for range n {
			o.post(o.nodesChanged)
		}
	})
	wg.Wait()
	if err := o.close(false); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{"announce", "secret", "nodes"} {
		if got := a.count(call); got != n {
			t.Errorf("%s ran %d times, want %d", call, got, n)
		}
	}
	if a.calls[len(a.calls)-1] != "close" || a.count("close") != 1 {
		t.Errorf("close is not the last call, once: %v", a.calls[len(a.calls)-4:])
	}
	if err := (proxy{o}).Announce(t.Context(), nil); !errors.Is(err, errClosed) {
		t.Errorf("Announce after close = %v, want errClosed", err)
	}
}

// TestOwnerWaitsForNode: a type that NeedsNode starts when the nodes
// first hold this node, with it; until then Announce and the probe say
// what it waits for, and a failed start is tried again at the next
// change.
func TestOwnerWaitsForNode(t *testing.T) {
	a := &serialAnnouncer{t: t}
	var selves []string
	fail := true
	typ := Type{NeedsNode: true, Grace: 42, New: func(_ context.Context, env Env, _ config.Announcer) (*Instance, error) {
		selves = append(selves, env.Self.Name)
		if fail {
			return nil, errors.New("no IPv4 InternalIP")
		}
		return &Instance{Announcer: a, Grace: 7}, nil
	}}
	o := newOwner("tor", typ, config.Announcer{Name: "tor"}, Env{NodeName: "n1", Log: discard()})
	var self *model.Node
	o.nodes = func() ([]*model.Node, *model.Node) { return nil, self }
	o.start()
	defer o.close(false)
	step := func() { _ = o.do(t.Context(), func(ctx context.Context) error { o.nodesChanged(ctx); return nil }) }

	step() // nodes without this one
	err := (proxy{o}).Announce(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), "waiting for the watch to report node n1") {
		t.Errorf("Announce before the node = %v, want it to say it waits for n1", err)
	}
	if o.grace() != 42 || o.probe() == nil {
		t.Errorf("before the node: grace %v, probe %v; want the type's grace and a failure", o.grace(), o.probe())
	}
	self = &model.Node{Name: "n1"}
	step()
	if err := o.probe(); err == nil || err.Error() != "no IPv4 InternalIP" {
		t.Errorf("probe after a failed start = %v, want its error", err)
	}
	fail = false
	step()
	step() // built once only
	if err := (proxy{o}).Announce(t.Context(), nil); err != nil || a.count("announce") != 1 {
		t.Errorf("Announce once started = %v (%d calls), want it passed on", err, a.count("announce"))
	}
	if o.grace() != 7 || o.probe() != nil {
		t.Errorf("once started: grace %v, probe %v; want the instance's", o.grace(), o.probe())
	}
	if len(selves) != 2 || selves[0] != "n1" {
		t.Errorf("New ran for %v, want twice with n1", selves)
	}
}

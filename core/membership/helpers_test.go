package membership_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/switchyard-lb/switchyard/core/membership"
	"github.com/switchyard-lb/switchyard/test/harness"
)

// deadline bounds every wait: generous, since tests share a loaded
// machine and run under -race. Nothing asserts on how fast it is.
const deadline = 2 * time.Minute

// addr returns the i-th loopback address used as a node: 127.0.0.(10+i).
func addr(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

func name(i int) string { return fmt.Sprintf("node-%d", i) }

type option func(*membership.Config)

// start runs a member named name(i) on addr(i) (port: a free one unless
// set by an option), closing it at the end of the test if the test has
// not.
func start(t *testing.T, i int, opts ...option) *membership.Membership {
	t.Helper()
	cfg := membership.Config{
		NodeName: name(i),
		BindAddr: addr(i),
		BindPort: -1,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := membership.New(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.NodeName, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	t.Cleanup(func() {
		ctx, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer stop()
		_ = m.Close(ctx)
		cancel()
		<-done
	})
	return m
}

// peersOf returns the peers to join: the members given, by name and
// address.
func peersOf(ms ...*membership.Membership) []membership.Peer {
	var out []membership.Peer
	for _, m := range ms {
		out = append(out, membership.Peer{Name: nameOf(m), Addr: m.LocalAddr().String()})
	}
	return out
}

func nameOf(m *membership.Membership) string {
	for _, mem := range m.Members() {
		if mem.Addr == m.LocalAddr() {
			return mem.Name
		}
	}
	return ""
}

// cluster starts n members and joins them all through member 0.
func cluster(t *testing.T, n int, opts ...option) []*membership.Membership {
	t.Helper()
	ms := make([]*membership.Membership, n)
	for i := range n {
		ms[i] = start(t, i, opts...)
	}
	for _, m := range ms[1:] {
		m.SetPeers(peersOf(ms[0]))
	}
	for i, m := range ms {
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s sees %d alive", name(i), n), func() bool { return m.Size() == n }))
		// A daemon that just started waits a window before it counts
		// itself alive (the guard).
		harness.Poll(t, deadline, harness.Cond(fmt.Sprintf("%s counts itself alive", name(i)), func() bool {
			alive, _ := m.Alive(name(i))
			return alive
		}))
	}
	return ms
}

// view is a member's opinion of each named node: alive/known.
func view(m *membership.Membership, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		alive, known := m.Alive(n)
		out[n] = fmt.Sprintf("alive=%v known=%v", alive, known)
	}
	return out
}

func states(m *membership.Membership) map[string]string {
	out := map[string]string{}
	for _, mem := range m.Members() {
		out[mem.Name] = mem.State.String()
	}
	return out
}

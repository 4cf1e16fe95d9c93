package arp

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	mdarp "github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"

	"github.com/switchyard-lb/switchyard/announcers/arp/arptest"
	"github.com/switchyard-lb/switchyard/core/model"
)

// fakeTimers records scheduled functions; the test fires them.
type fakeTimers struct {
	mu      sync.Mutex
	pending []*fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (ft *fakeTimers) afterFunc(d time.Duration, f func()) func() bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	t := &fakeTimer{d: d, f: f}
	ft.pending = append(ft.pending, t)
	return func() bool {
		ft.mu.Lock()
		defer ft.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fireAll runs every timer pending now, stopped ones included (a stopped
// timer may already be running in real life), and returns how many were
// live.
func (ft *fakeTimers) fireAll() (live int) {
	ft.mu.Lock()
	ts := ft.pending
	ft.pending = nil
	ft.mu.Unlock()
	for _, t := range ts {
		if !t.stopped {
			live++
		}
		t.f()
	}
	return live
}

func TestRepeats(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.200")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface to satisfy arp.New: %v", err)
	}
	set := func(addrs ...netip.Addr) []model.Announcement {
		s := []model.Announcement{}
		for _, a := range addrs {
			s = append(s, model.Announcement{Addr: a})
		}
		return s
	}
	// Each step announces (unless nil), checks the live timer, then
	// fires the pending timers if fire is set and counts the gratuitous
	// pairs they sent.
	type step struct {
		announce  []model.Announcement
		fire      bool
		wantTimer time.Duration
		wantPairs int
	}
	tests := []struct {
		name    string
		repeats int
		steps   []step
	}{
		{"default twice, a second apart", 0, []step{
			{announce: set(vip), fire: true, wantTimer: time.Second, wantPairs: 1},
			{fire: true, wantTimer: time.Second, wantPairs: 1},
			{fire: true},
		}},
		{"disabled", -1, []step{{announce: set(vip), fire: true}}},
		{"unchanged set keeps the count", 2, []step{
			{announce: set(vip), fire: true, wantTimer: time.Second, wantPairs: 1},
			{announce: set(vip), fire: true, wantTimer: time.Second, wantPairs: 1},
			{announce: set(vip), fire: true},
		}},
		{"withdrawn before the timer", 3, []step{
			{announce: set(vip), wantTimer: time.Second},
			{announce: set(), fire: true},
		}},
		{"withdrawn and regained restarts the count", 2, []step{
			{announce: set(vip), wantTimer: time.Second},
			{announce: set()},
			{announce: set(vip), fire: true, wantTimer: time.Second, wantPairs: 1},
			{fire: true, wantTimer: time.Second, wantPairs: 1},
			{fire: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := arptest.NewPacketConn()
			ifi := *lo
			ifi.HardwareAddr = mac
			c, err := mdarp.New(&ifi, pc)
			if err != nil {
				t.Fatal(err)
			}
			a := New([]Link{{Name: "eth0", MAC: mac, ARP: c}}, Options{Repeats: tt.repeats})
			defer a.Close()
			ft := &fakeTimers{}
			a.afterFunc = ft.afterFunc
			for i, s := range tt.steps {
				if s.announce != nil {
					if err := a.Announce(context.Background(), s.announce); err != nil {
						t.Fatalf("step %d: Announce: %v", i, err)
					}
				}
				drainFrames(pc)
				var gotTimer time.Duration
				ft.mu.Lock()
				for _, p := range ft.pending {
					if !p.stopped {
						gotTimer = p.d
					}
				}
				ft.mu.Unlock()
				got := 0
				if s.fire {
					ft.fireAll()
					got = len(drainFrames(pc))
				}
				if diff := cmp.Diff([]any{s.wantTimer, 2 * s.wantPairs}, []any{gotTimer, got}); diff != "" {
					t.Errorf("step %d: [live timer, frames sent by timers] (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func drainFrames(pc *arptest.PacketConn) [][]byte {
	var out [][]byte
	for {
		select {
		case b := <-pc.Written():
			var f ethernet.Frame
			if f.UnmarshalBinary(b) == nil {
				out = append(out, b)
			}
		default:
			return out
		}
	}
}

func TestRepeatKeepsAFailedJoinPending(t *testing.T) {
	// A repeat whose announcement goes out while joining the
	// solicited-node group still fails must not mark the address done:
	// the next Announce retries the join.
	vip := netip.MustParseAddr("2001:db8::200")
	nc := arptest.NewNDPConn()
	var mu sync.Mutex
	var reported []error
	a := New([]Link{{Name: "eth0", Index: 7, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}, NDP: nc}},
		Options{Repeats: 1, OnError: func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, err)
		}})
	defer a.Close()
	ft := &fakeTimers{}
	a.afterFunc = ft.afterFunc
	boom := errors.New("ENOBUFS")
	nc.FailJoins(boom)
	set := []model.Announcement{{Addr: vip}}
	if err := a.Announce(context.Background(), set); !errors.Is(err, boom) {
		t.Fatalf("Announce with failing joins = %v, want %v", err, boom)
	}
	if live := ft.fireAll(); live != 1 {
		t.Fatalf("live repeat timers = %d, want 1", live)
	}
	mu.Lock()
	if len(reported) != 1 || !errors.Is(reported[0], boom) {
		t.Errorf("errors reported by the repeat = %v, want one wrapping %v", reported, boom)
	}
	mu.Unlock()
	nc.FailJoins(nil)
	if err := a.Announce(context.Background(), set); err != nil {
		t.Fatalf("Announce: %v", err)
	}
	if diff := cmp.Diff([]netip.Addr{netip.MustParseAddr("ff02::1:ff00:200")}, nc.Groups(), cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
		t.Errorf("groups after the retry (-want +got):\n%s", diff)
	}
}

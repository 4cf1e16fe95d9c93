package membership

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// DefaultPort is the gossip port (TCP and UDP), the same as the config
// file's default (core/config.DefaultMembershipPort).
const DefaultPort = 7946

// Config configures a Membership.
type Config struct {
	// NodeName is the Kubernetes node name: the name members know this
	// daemon by, and the name election asks about. Required.
	NodeName string
	// BindAddr and BindPort are where to gossip (UDP probes and gossip,
	// TCP state sync). Defaults "0.0.0.0" and DefaultPort; a negative
	// port picks a free one (tests).
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what other members dial; by
	// default the bind address (or the first private address when bound
	// to all) and the bound port.
	AdvertiseAddr string
	AdvertisePort int
	// Keys, when non-empty, encrypt and authenticate gossip (AES-GCM);
	// each is 16, 24 or 32 bytes. The first encrypts; all decrypt, so a
	// key is rotated by adding the new one second, then first, then
	// removing the old one. See ParseKeys for the Secret's file format.
	Keys [][]byte
	// Timing tunes failure detection; the zero value means LANTiming().
	Timing Timing
	// RejoinInterval is how often Run dials peers given to SetPeers that
	// are not alive members. Default 10s.
	RejoinInterval time.Duration
	// DisableQuorumGuard lets a daemon that sees no majority alive still
	// trust its view (see the package documentation).
	DisableQuorumGuard bool
	// RestartGrace is how long this daemon holds a member that left
	// saying it restarts (CloseForRestart) alive, so that its layer-2
	// addresses stay where they are until it is back; and, when
	// positive, what makes CloseForRestart say so. Zero: a member that
	// restarts leaves as any other, and its addresses move at once. A
	// member that stops without a word (a crash) is judged by the
	// failure detector, whatever the grace.
	RestartGrace time.Duration
	// Logger receives memberlist's log lines. Default: discard.
	Logger *slog.Logger
}

// Timing tunes memberlist's SWIM failure detector. See LANTiming for the
// reasoning behind the defaults.
type Timing struct {
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	IndirectChecks          int
	GossipInterval          time.Duration
	GossipNodes             int
	RetransmitMult          int
	PushPullInterval        time.Duration
	GossipToTheDeadTime     time.Duration
	DeadNodeReclaimTime     time.Duration
	TCPTimeout              time.Duration
	AwarenessMaxMultiplier  int
}

// LANTiming returns the defaults, tuned for sub-second detection of a
// dead node on a data-centre LAN (memberlist's own LAN defaults take
// about 5 s):
//
//   - ProbeInterval 100ms: every member probes one other member per
//     interval, so a dead node is probed by someone within about one
//     interval. The cost is one small UDP ping and ack per member and
//     interval: about 10 packets per second per daemon, whatever the
//     cluster size.
//   - ProbeTimeout 50ms: the wait for a direct ack. LAN round trips are
//     well under a millisecond; 50ms leaves room for a GC pause or a
//     CPU-throttled pod. A missed direct ack is not a verdict: indirect
//     probes through IndirectChecks (3) other members and a TCP ping run
//     until the end of the probe interval.
//   - SuspicionMult 3: a suspected node has
//     3 × max(1, log10(N)) × ProbeInterval to refute before it is
//     declared dead: 300ms up to 10 nodes, 600ms at 100, 900ms at 1000.
//     With 3, memberlist wants one independent confirmation (mult − 2)
//     from another member's probe to use that minimum; without it the
//     timer runs to SuspicionMaxTimeoutMult (3) times it, 0.9 s for small
//     clusters. Expected detection is therefore about
//     0.05 + 0.1 + 0.3 ≈ 0.5 s in a small cluster, under a second up to
//     roughly a hundred nodes when a confirmation arrives.
//   - AwarenessMaxMultiplier 8 (Lifeguard): a daemon that itself misses
//     acks (an overloaded node) stretches its own timeouts up to 8× before
//     it accuses others, which is what keeps these short timeouts from
//     causing false deaths.
//   - GossipInterval 50ms to GossipNodes 3: a death notice reaches the
//     whole cluster in a few rounds (~log3(N) × 50ms); gossip is only
//     sent when there is news.
//   - PushPullInterval 15s: full state syncs repair missed gossip;
//     TCPTimeout 2s bounds a join or sync with an unreachable peer.
//   - DeadNodeReclaimTime 5s: a restarted daemon may come back at a new
//     address under the same node name after 5 s.
func LANTiming() Timing {
	return Timing{
		ProbeInterval:           100 * time.Millisecond,
		ProbeTimeout:            50 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		IndirectChecks:          3,
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		RetransmitMult:          4,
		PushPullInterval:        15 * time.Second,
		GossipToTheDeadTime:     15 * time.Second,
		DeadNodeReclaimTime:     5 * time.Second,
		TCPTimeout:              2 * time.Second,
		AwarenessMaxMultiplier:  8,
	}
}

// FailoverBound is the longest, by this timing's design, from a member's
// death to the other daemons acting on it (its layer-2 addresses move),
// in a cluster of members daemons, with the quorum guard's fence when
// guard is set, while no daemon is starved (Lifeguard's awareness then
// stretches the timeouts, up to AwarenessMaxMultiplier times). It adds:
//   - a probe round: each survivor probes the others in turn, one per
//     ProbeInterval, so the dead member within members-1 intervals, and
//     the probe (direct, indirect, TCP) fails at the end of its interval;
//   - the suspicion's longest timeout, when no other daemon confirms it:
//     SuspicionMaxTimeoutMult x SuspicionMult x max(1, log10(members))
//     intervals (memberlist's);
//   - two gossip rounds for the death to reach the daemon taking over,
//     and half an interval for the view's refresh tick;
//   - the guard's fence, 2 x max(SuspicionMult, members) intervals from
//     the death.
//
// With LANTiming and three daemons: 0.3 + 0.9 + 0.15 + 0.6 = 1.95 s. The
// daemon's sync and its gratuitous ARP come on top. A confirmation from
// another survivor's probe shortens the suspicion towards its minimum
// (SuspicionMult x max(1, log10(members)) intervals), so most failovers
// take well under the bound.
func (t Timing) FailoverBound(members int, guard bool) time.Duration {
	members = max(members, 1)
	probe := time.Duration(members) * t.ProbeInterval
	scale := max(1, math.Log10(float64(members)))
	suspicion := time.Duration(float64(time.Duration(t.SuspicionMaxTimeoutMult*t.SuspicionMult)*t.ProbeInterval) * scale)
	bound := probe + suspicion + 2*t.GossipInterval + t.ProbeInterval/2
	if guard {
		bound += guardInput{probeInterval: t.ProbeInterval, suspicionMult: t.SuspicionMult}.window(members)
	}
	return bound
}

// ParseKeys reads gossip keys from the contents of a Secret's key file:
// one base64-encoded key per line (16, 24 or 32 bytes once decoded), the
// first line being the key that encrypts. Blank lines and lines starting
// with '#' are skipped.
func ParseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := bytes.TrimSpace(sc.Bytes())
		if len(s) == 0 || s[0] == '#' {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(string(s))
		if err != nil {
			return nil, fmt.Errorf("gossip key on line %d: %w", line, err)
		}
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("gossip key on line %d: %w", line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read gossip keys: %w", err)
	}
	return keys, nil
}

func checkKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("key is %d bytes, want 16, 24 or 32", len(k))
}

package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchyard-lb/switchyard/announcers/bgp"
	"github.com/switchyard-lb/switchyard/announcers/bgp/bfd"
	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/election"
	"github.com/switchyard-lb/switchyard/core/metrics"
	"github.com/switchyard-lb/switchyard/core/model"
)

// scrapeTimeout bounds the BGP session query of one scrape.
const scrapeTimeout = 2 * time.Second

// BGP is the bgp announcer type: an embedded speaker (announcers/bgp)
// that every eligible node runs. It needs this node: the router ID
// defaults to its first IPv4 InternalIP, and peers select nodes by label.
var BGP = Type{
	Mode:      election.BGP,
	NeedsNode: true,
	Grace:     bgp.DefaultHoldTime,
	Check: func(ac config.Announcer) error {
		_, _, err := bgpBase(ac)
		return err
	},
	New: newBGP,
}

var bgpSessionDesc = prometheus.NewDesc(metrics.Namespace+"_bgp_session_up",
	"1 when the BGP session with the peer is established.", []string{"announcer", "peer"}, nil)

var (
	bfdSessionDesc = prometheus.NewDesc(metrics.Namespace+"_bfd_session_up",
		"1 when the BFD session with the BGP peer is up.", []string{"announcer", "peer"}, nil)
	bfdStateDesc = prometheus.NewDesc(metrics.Namespace+"_bfd_session_state",
		"1 for the BFD session's current state (admindown, down, init, up).", []string{"announcer", "peer", "state"}, nil)
	bfdDownsDesc = prometheus.NewDesc(metrics.Namespace+"_bfd_session_downs_total",
		"Times the BFD session with the BGP peer went from up to down.", []string{"announcer", "peer"}, nil)
	bfdHeldDesc = prometheus.NewDesc(metrics.Namespace+"_bfd_bgp_held_down",
		"1 while the BGP session with the peer is held down by a BFD failure.", []string{"announcer", "peer"}, nil)
)

func newBGP(ctx context.Context, env Env, ac config.Announcer) (*Instance, error) {
	bc, secrets, err := bgpConfig(ac, env.Self)
	if err != nil {
		return nil, err
	}
	pw := &bgpPasswords{ns: env.Secrets.Namespace(), log: env.Log, announcer: ac.Name, errs: map[*secretPeer]error{}}
	for _, sp := range secrets {
		p, err := pw.initial(ctx, env.Secrets, sp.ref)
		if err != nil {
			// The other peers come up; this one when its Secret does.
			err = fmt.Errorf("bgp peer %s: password: %w", sp.peer, err)
			env.Log.Error("bgp peer stays down until its password Secret is readable", "announcer", ac.Name, "peer", sp.peer, "err", err)
		} else {
			j := slices.IndexFunc(bc.Peers, func(p bgp.Peer) bool { return p.Address == sp.peer })
			bc.Peers[j].Password, bc.Peers[j].AdminDown = p, false
		}
		pw.add(sp, err)
	}
	s, err := bgp.New(ctx, bc, env.Log)
	if err != nil {
		return nil, err
	}
	pw.speaker = s
	inst := &Instance{
		Announcer: s,
		// No session established, with its peers' password failures as
		// the likely reason.
		Probe: func() error {
			err := s.Healthy()
			if err != nil {
				err = errors.Join(err, pw.failures())
			}
			return err
		},
		Grace:   maxHoldTime(bc.Peers),
		Collect: func(ch chan<- prometheus.Metric) { collectSessions(s, ch); collectBFD(s, ch) },
		State:   func() any { return bgpState(s) },
		// With graceful restart, routers keep the routes while the
		// daemon restarts; without it, this is Close.
		Restart: s.CloseForRestart,
	}
	var names []string
	for _, sp := range secrets {
		if !slices.Contains(names, sp.ref.Name) {
			names = append(names, sp.ref.Name)
		}
	}
	for _, name := range names {
		inst.Follow = append(inst.Follow, Follow{Name: name, Apply: func(ctx context.Context, s *corev1.Secret) { pw.apply(ctx, name, s) }})
	}
	return inst, nil
}

// collectSessions reports the speaker's sessions.
func collectSessions(s *bgp.Speaker, ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	sessions, err := s.Sessions(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(bgpSessionDesc, err)
		return
	}
	for _, x := range sessions {
		up := 0.0
		if x.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(bgpSessionDesc, prometheus.GaugeValue, up, s.Name(), x.Peer.String())
	}
}

// collectBFD reports the speaker's BFD sessions.
func collectBFD(s *bgp.Speaker, ch chan<- prometheus.Metric) {
	gauge := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, x := range s.BFDSessions() {
		peer := x.Peer.String()
		ch <- prometheus.MustNewConstMetric(bfdSessionDesc, prometheus.GaugeValue, gauge(x.State == bfd.Up), s.Name(), peer)
		for _, st := range []bfd.State{bfd.AdminDown, bfd.Down, bfd.Init, bfd.Up} {
			ch <- prometheus.MustNewConstMetric(bfdStateDesc, prometheus.GaugeValue, gauge(x.State == st), s.Name(), peer, st.String())
		}
		ch <- prometheus.MustNewConstMetric(bfdDownsDesc, prometheus.CounterValue, float64(x.Downs), s.Name(), peer)
		ch <- prometheus.MustNewConstMetric(bfdHeldDesc, prometheus.GaugeValue, gauge(s.BFDHeld(x.Peer)), s.Name(), peer)
	}
}

// BFDState is one BFD session in /debug/state.
type BFDState struct {
	Peer          netip.Addr `json:"peer"`
	Multihop      bool       `json:"multihop,omitempty"`
	State         string     `json:"state"`
	RemoteState   string     `json:"remoteState"`
	Diag          string     `json:"diag"`
	LocalDiscr    uint32     `json:"localDiscriminator"`
	RemoteDiscr   uint32     `json:"remoteDiscriminator"`
	TxInterval    string     `json:"txInterval"`
	DetectionTime string     `json:"detectionTime"`
	LastChange    time.Time  `json:"lastChange"`
	Downs         uint64     `json:"downs"`
	Received      uint64     `json:"received"`
	Sent          uint64     `json:"sent"`
	SendErrors    uint64     `json:"sendErrors,omitempty"`
	LastSendError string     `json:"lastSendError,omitempty"`
	// BGPHeldDown is set while the BGP session is down for a BFD failure.
	BGPHeldDown bool `json:"bgpHeldDown,omitempty"`
}

// BGPState is the bgp announcer's part of /debug/state.
type BGPState struct {
	BFD []BFDState `json:"bfd,omitempty"`
}

func bgpState(s *bgp.Speaker) BGPState {
	var out BGPState
	for _, x := range s.BFDSessions() {
		out.BFD = append(out.BFD, BFDState{
			Peer: x.Peer, Multihop: x.Multihop, State: x.State.String(), RemoteState: x.RemoteState.String(),
			Diag: x.LocalDiag.String(), LocalDiscr: x.LocalDiscr, RemoteDiscr: x.RemoteDiscr,
			TxInterval: x.TxInterval.String(), DetectionTime: x.DetectionTime.String(), LastChange: x.LastChange,
			Downs: x.Downs, Received: x.Received, Sent: x.Sent, SendErrors: x.SendErrors, LastSendError: x.LastSendError,
			BGPHeldDown: s.BFDHeld(x.Peer),
		})
	}
	return out
}

// maxHoldTime is the longest hold time of peers (bgp.DefaultHoldTime
// where unset), the BGP announcer's readiness grace.
func maxHoldTime(peers []bgp.Peer) time.Duration {
	d := time.Duration(0)
	for _, p := range peers {
		h := p.HoldTime
		if h == 0 {
			h = bgp.DefaultHoldTime
		}
		d = max(d, h)
	}
	return d
}

// bgpConfig translates an announcer's BGP block for this node: the
// router ID defaults to its first IPv4 InternalIP, and peers whose node
// selector it does not match are left out. Peers with a passwordSecret
// are AdminDown and returned in secrets, for the caller to resolve.
func bgpConfig(ac config.Announcer, self *model.Node) (bgp.Config, []*secretPeer, error) {
	bc, peers, err := bgpBase(ac)
	if err != nil {
		return bc, nil, err
	}
	if !bc.RouterID.IsValid() {
		internal := self.IPs(model.NodeInternalIP)
		i := slices.IndexFunc(internal, netip.Addr.Is4)
		if i < 0 {
			return bc, nil, fmt.Errorf("no routerID configured and node %s has no IPv4 InternalIP", self.Name)
		}
		bc.RouterID = internal[i]
	}
	var secrets []*secretPeer
	for _, p := range peers {
		if !labels.SelectorFromSet(p.selector).Matches(labels.Set(self.Labels)) {
			continue
		}
		bc.Peers = append(bc.Peers, p.peer)
		if p.secret != nil {
			secrets = append(secrets, p.secret)
		}
	}
	return bc, secrets, nil
}

// basePeer is a configured peer before node selection.
type basePeer struct {
	peer     bgp.Peer
	selector map[string]string
	secret   *secretPeer
}

// bgpBase is what of an announcer's BGP block does not depend on the
// node: the router ID when configured (else invalid) and every peer.
// Its errors are the config's (BGP.Check), found before the node is.
func bgpBase(ac config.Announcer) (bc bgp.Config, peers []basePeer, err error) {
	b := ac.BGP
	bc = bgp.Config{Name: ac.Name, LocalASN: b.ASN, ListenPort: b.ListenPort}
	if gr := b.GracefulRestart; gr != nil && gr.Enabled {
		bc.GracefulRestart = bgp.GracefulRestart{Enabled: true, RestartTime: gr.RestartTime.Std()}
	}
	if b.RouterID != "" {
		id, err := netip.ParseAddr(b.RouterID)
		if err != nil {
			return bc, nil, fmt.Errorf("routerID: %w", err)
		}
		bc.RouterID = id
	}
	for _, p := range b.Peers {
		addr, err := netip.ParseAddr(p.Address)
		if err != nil {
			return bc, nil, fmt.Errorf("peer %s: %w", p.Address, err)
		}
		bp := basePeer{selector: p.NodeSelector, peer: bgp.Peer{
			Address: addr, ASN: p.ASN, Port: uint16(p.Port),
			HoldTime: p.HoldTime.Std(), KeepaliveTime: p.KeepaliveTime.Std(),
			EBGPMultihopTTL: uint8(min(p.EBGPMultihop, 255)),
			Communities:     p.Communities, LocalPref: p.LocalPreference,
		}}
		if b := p.BFD; b != nil {
			bp.peer.BFD = &bgp.BFD{MinRx: b.MinRx.Std(), MinTx: b.MinTx.Std(), Multiplier: uint8(min(max(b.Multiplier, 0), 255))}
		}
		switch {
		case p.PasswordFile != "":
			pw, err := os.ReadFile(p.PasswordFile)
			if err != nil {
				return bc, nil, fmt.Errorf("peer %s: password: %w", p.Address, err)
			}
			bp.peer.Password = strings.TrimSpace(string(pw))
		case p.PasswordSecret != nil:
			// Down until the Secret's password is known: a peer never
			// connects without its key.
			bp.peer.AdminDown = true
			bp.secret = &secretPeer{announcer: ac.Name, peer: addr, ref: *p.PasswordSecret}
		}
		peers = append(peers, bp)
	}
	return bc, peers, nil
}

// passwordSetter is what bgpPasswords needs of a speaker; *bgp.Speaker
// implements it.
type passwordSetter interface {
	SetPassword(ctx context.Context, peer netip.Addr, password string) error
}

// secretPeer is a BGP peer whose TCP MD5 password is a key of a Secret.
type secretPeer struct {
	announcer string
	peer      netip.Addr
	ref       config.SecretKeyRef
}

// bgpPasswords keeps the passwords of one speaker's peers in step with
// their Secrets. A peer whose Secret or key is missing stays down
// (bgp.Peer.AdminDown) until it appears; a later deletion keeps the
// password in force (the session stays up) and is reported. apply runs
// on the announcer's owner goroutine; failures may be read from any.
type bgpPasswords struct {
	ns        string
	log       *slog.Logger
	announcer string
	speaker   passwordSetter
	peers     []*secretPeer

	mu   sync.Mutex
	errs map[*secretPeer]error // the last failure of each peer's password
}

// secretPassword returns the password ref names in s (nil: no such
// Secret), with surrounding white space trimmed as for passwordFile.
func secretPassword(ns string, ref config.SecretKeyRef, s *corev1.Secret) (string, error) {
	if s == nil {
		return "", fmt.Errorf("password Secret %s/%s not found", ns, ref.Name)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("password Secret %s/%s has no key %q", ns, ref.Name, ref.Key)
	}
	pw := strings.TrimSpace(string(v))
	if pw == "" {
		return "", fmt.Errorf("password Secret %s/%s: key %q is empty", ns, ref.Name, ref.Key)
	}
	return pw, nil
}

// initial reads ref's Secret once, before the speaker starts, so that a
// peer whose Secret exists comes up with its password at once.
func (b *bgpPasswords) initial(ctx context.Context, secrets *Secrets, ref config.SecretKeyRef) (string, error) {
	s, err := secrets.Get(ctx, ref.Name)
	if err != nil {
		return "", err
	}
	return secretPassword(b.ns, ref, s)
}

// add registers a peer to keep in step; err is its initial failure.
func (b *bgpPasswords) add(p *secretPeer, err error) {
	b.peers = append(b.peers, p)
	b.record(p, err)
}

func (b *bgpPasswords) record(p *secretPeer, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.errs, p)
		return
	}
	b.errs[p] = err
}

// apply sets the password of every peer whose Secret is name; s nil
// means the Secret is gone.
func (b *bgpPasswords) apply(ctx context.Context, name string, s *corev1.Secret) {
	if ctx.Err() != nil {
		return // shutting down: the speaker is closing
	}
	for _, p := range b.peers {
		if p.ref.Name != name {
			continue
		}
		pw, err := secretPassword(b.ns, p.ref, s)
		if err == nil {
			err = b.speaker.SetPassword(ctx, p.peer, pw)
		}
		if err != nil {
			err = fmt.Errorf("bgp peer %s: password: %w", p.peer, err)
			b.log.Error("bgp password not applied; the peer keeps its last password, or stays down without one",
				"announcer", p.announcer, "peer", p.peer, "err", err)
		}
		b.record(p, err)
	}
}

// failures returns the current password failures of the peers.
func (b *bgpPasswords) failures() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, p := range b.peers {
		if err := b.errs[p]; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by Config.withDefaults.
const (
	DefaultName         = "bgp"
	DefaultHoldTime     = 90 * time.Second
	DefaultConnectRetry = 2 * time.Second
	DefaultRestartTime  = 120 * time.Second
	defaultPort         = 179
)

// Config is the speaker's configuration. The zero value of every optional
// field means its documented default.
type Config struct {
	// Name is the announcer's name (Announcer.Name); default "bgp".
	Name string
	// LocalASN is this node's AS number; required.
	LocalASN uint32
	// RouterID is the BGP identifier, an IPv4 address; required.
	RouterID netip.Addr
	// ListenPort, when positive, makes the speaker accept sessions on that
	// port (179 needs CAP_NET_BIND_SERVICE). Zero: dial out only.
	ListenPort int
	// NextHop4 and NextHop6, when set, are the next hop of every IPv4 and
	// IPv6 route. Unset, each peer gets the local address of its session.
	// A peer carries IPv6 routes over an IPv4 session (and the reverse)
	// only when the matching next hop is set.
	NextHop4, NextHop6 netip.Addr
	// GracefulRestart, when Enabled, advertises RFC 4724 graceful restart
	// to every peer: after a crash, peers keep this node's routes for
	// RestartTime (default 120 s, at most 4095 s).
	GracefulRestart GracefulRestart
	Peers           []Peer
}

// GracefulRestart is the RFC 4724 capability this speaker advertises.
type GracefulRestart struct {
	Enabled     bool
	RestartTime time.Duration
}

// Peer is one BGP neighbour.
type Peer struct {
	// Address is the neighbour's address; required.
	Address netip.Addr
	// ASN is the neighbour's AS number; required. Equal to LocalASN makes
	// an iBGP session.
	ASN uint32
	// Port is the neighbour's TCP port; default 179.
	Port uint16
	// SourceAddress, when set, is the local address the session is dialled
	// from (and so the default next hop).
	SourceAddress netip.Addr
	// HoldTime (default 90 s, at least 3 s) and KeepaliveTime (default
	// HoldTime/3) are the session timers, in whole seconds.
	HoldTime, KeepaliveTime time.Duration
	// ConnectRetry is the wait between connection attempts; default 2 s
	// (GoBGP's own default is 120 s, which delays recovery by minutes).
	ConnectRetry time.Duration
	// Password enables TCP MD5 signatures. The caller resolves a Secret
	// reference into this string. With ListenPort set, accepted sessions
	// only get the key when the binary runs with GODEBUG multipathtcp=0:
	// Go 1.24+ listens with MPTCP, which refuses TCP_MD5SIG (GoBGP then
	// only logs a warning). Dialled sessions are unaffected.
	Password string
	// AdminDown configures the peer without attempting a session, until
	// SetPassword brings it up: the daemon sets it while the peer's
	// password Secret cannot be read, so the peer never connects without
	// its key. Sessions reports it idle.
	AdminDown bool
	// EBGPMultihopTTL, when non-zero, allows an eBGP neighbour that many
	// hops away.
	EBGPMultihopTTL uint8
	// Communities are added to every route sent to this peer: "ASN:VALUE"
	// (each 0-65535) or a well-known name (no-export, no-advertise,
	// no-export-subconfed, no-peer, graceful-shutdown, blackhole).
	Communities []string
	// LocalPref, when non-zero, sets LOCAL_PREF on routes sent to this
	// peer. It only travels on iBGP sessions.
	LocalPref uint32
	// BFD, when set, runs a BFD session with the peer (single hop, or
	// multihop when EBGPMultihopTTL is set): its failure tears the BGP
	// session down at once instead of after the hold time.
	BFD *BFD
}

// BFD is a peer's BFD session: the intervals this node sends at (MinTx)
// and accepts (MinRx) while the session is Up, and the detect
// multiplier. The peer detects a failure after Multiplier times the
// slower of this node's MinTx and its own receive interval.
type BFD struct {
	MinRx, MinTx time.Duration
	Multiplier   uint8
}

// BFD limits: below 10 ms no software implementation keeps up, and
// intervals travel in whole microseconds.
const (
	MinBFDInterval = 10 * time.Millisecond
	MaxBFDInterval = time.Minute
)

func (b BFD) validate() error {
	var errs []error
	for _, iv := range []struct {
		name string
		d    time.Duration
	}{{"minRx", b.MinRx}, {"minTx", b.MinTx}} {
		if iv.d < MinBFDInterval || iv.d > MaxBFDInterval || iv.d%time.Microsecond != 0 {
			errs = append(errs, fmt.Errorf("bfd %s %s: want whole microseconds in %s..%s", iv.name, iv.d, MinBFDInterval, MaxBFDInterval))
		}
	}
	if b.Multiplier == 0 {
		errs = append(errs, errors.New("bfd multiplier must be at least 1"))
	}
	return errors.Join(errs...)
}

var wellKnownCommunities = map[string]bool{
	"no-export": true, "no-advertise": true, "no-export-subconfed": true,
	"no-peer": true, "graceful-shutdown": true, "blackhole": true,
}

// withDefaults returns a copy of c with defaults filled in.
func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.GracefulRestart.Enabled && c.GracefulRestart.RestartTime == 0 {
		c.GracefulRestart.RestartTime = DefaultRestartTime
	}
	peers := make([]Peer, len(c.Peers))
	for i, p := range c.Peers {
		if p.Port == 0 {
			p.Port = defaultPort
		}
		if p.HoldTime == 0 {
			p.HoldTime = DefaultHoldTime
		}
		if p.KeepaliveTime == 0 {
			p.KeepaliveTime = p.HoldTime / 3
		}
		if p.ConnectRetry == 0 {
			p.ConnectRetry = DefaultConnectRetry
		}
		peers[i] = p
	}
	c.Peers = peers
	return c
}

// validate reports every problem of a defaulted config at once.
func (c Config) validate() error {
	var errs []error
	if c.LocalASN == 0 {
		errs = append(errs, errors.New("local ASN is required"))
	}
	if !c.RouterID.Is4() {
		errs = append(errs, fmt.Errorf("router ID %q is not an IPv4 address", c.RouterID))
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listen port %d out of range", c.ListenPort))
	}
	if c.NextHop4.IsValid() && !c.NextHop4.Is4() {
		errs = append(errs, fmt.Errorf("IPv4 next hop %s is not IPv4", c.NextHop4))
	}
	if c.NextHop6.IsValid() && (!c.NextHop6.Is6() || c.NextHop6.Is4In6()) {
		errs = append(errs, fmt.Errorf("IPv6 next hop %s is not IPv6", c.NextHop6))
	}
	if gr := c.GracefulRestart; gr.Enabled && (gr.RestartTime < time.Second || gr.RestartTime > 4095*time.Second) {
		errs = append(errs, fmt.Errorf("graceful restart time %s outside 1s..4095s", gr.RestartTime))
	}
	seen := map[netip.Addr]bool{}
	for i, p := range c.Peers {
		if err := p.validate(); err != nil {
			errs = append(errs, fmt.Errorf("peer %d (%s): %w", i, p.Address, err))
		}
		if seen[p.Address] {
			errs = append(errs, fmt.Errorf("peer %d: duplicate address %s", i, p.Address))
		}
		seen[p.Address] = true
	}
	return errors.Join(errs...)
}

func (p Peer) validate() error {
	var errs []error
	if !p.Address.IsValid() || p.Address.Zone() != "" {
		errs = append(errs, errors.New("address is required and may not have a zone"))
	}
	if p.ASN == 0 {
		errs = append(errs, errors.New("ASN is required"))
	}
	if p.SourceAddress.IsValid() && p.Address.IsValid() && p.SourceAddress.Is4() != p.Address.Is4() {
		errs = append(errs, fmt.Errorf("source address %s and peer address differ in family", p.SourceAddress))
	}
	if p.HoldTime < 3*time.Second || p.HoldTime > 65535*time.Second || p.HoldTime%time.Second != 0 {
		errs = append(errs, fmt.Errorf("hold time %s: want whole seconds in 3s..65535s", p.HoldTime))
	}
	if p.KeepaliveTime < time.Second || p.KeepaliveTime >= p.HoldTime || p.KeepaliveTime%time.Second != 0 {
		errs = append(errs, fmt.Errorf("keepalive time %s: want whole seconds, at least 1s and below the hold time", p.KeepaliveTime))
	}
	if p.ConnectRetry < time.Second || p.ConnectRetry%time.Second != 0 {
		errs = append(errs, fmt.Errorf("connect retry %s: want whole seconds, at least 1s", p.ConnectRetry))
	}
	for _, c := range p.Communities {
		if err := checkCommunity(c); err != nil {
			errs = append(errs, err)
		}
	}
	if p.BFD != nil {
		if err := p.BFD.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func checkCommunity(s string) error {
	if wellKnownCommunities[s] {
		return nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	if ok {
		_, err1 := strconv.ParseUint(hi, 10, 16)
		_, err2 := strconv.ParseUint(lo, 10, 16)
		if err1 == nil && err2 == nil {
			return nil
		}
	}
	return fmt.Errorf("community %q: want ASN:VALUE with each part in 0..65535, or a well-known name", s)
}

// ibgp reports whether the session with p is internal.
func (c Config) ibgp(p Peer) bool { return p.ASN == c.LocalASN }

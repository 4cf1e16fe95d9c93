package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-lb/switchyard/core/maglev"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// labelName is the name part of a qualified name.
var labelName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// dns1123Subdomain is the shape of a ConfigMap name.
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// Validate checks a config whose defaults are applied and returns every
// problem as an Errors, or nil.
func (c *Config) Validate() error {
	v := &validator{}
	if c.APIVersion != APIVersion {
		v.add("apiVersion", "%s", gotWant(c.APIVersion, APIVersion))
	}
	if c.Kind != Kind {
		v.add("kind", "%s", gotWant(c.Kind, Kind))
	}
	v.dataplane("dataplane", &c.Dataplane)
	v.conntrack("conntrack", &c.Conntrack)
	v.policies("policies", &c.Policies)
	pools := v.pools("pools", c.Pools)
	v.announcers("announcers", c.Announcers, pools)
	v.membership("membership", &c.Membership)
	v.hostPort("metrics.bindAddress", c.Metrics.BindAddress, DefaultMetricsAddress)
	v.hostPort("health.bindAddress", c.Health.BindAddress, DefaultHealthAddress)
	v.qualifiedName("loadBalancerClass", c.LoadBalancerClass)
	v.labelValue("serviceProxyName", c.ServiceProxyName)
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

type validator struct{ errs Errors }

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) dataplane(path string, d *Dataplane) {
	switch d.Mode {
	case ModeIPVS, ModeDryRun:
	default:
		v.add(path+".mode", "unknown mode %q (want %s or %s)", d.Mode, ModeIPVS, ModeDryRun)
	}
	v.detectLocal(path+".detectLocal", &d.DetectLocal)
	d.NodePortAddresses.validate(v, path+".nodePortAddresses")
	v.positive(path+".syncPeriod", d.SyncPeriod)
	v.positive(path+".minSyncPeriod", d.MinSyncPeriod)
	if d.MinSyncPeriod > d.SyncPeriod && d.SyncPeriod > 0 {
		v.add(path+".minSyncPeriod", "%s is longer than syncPeriod %s", d.MinSyncPeriod, d.SyncPeriod)
	}
	// The scheduler's valid names are the dataplane's: SchedulerCheck.
	ipvs, p := &d.IPVS, path+".ipvs"
	v.seconds(p+".tcpTimeout", ipvs.TCPTimeout)
	v.seconds(p+".tcpFinTimeout", ipvs.TCPFinTimeout)
	v.seconds(p+".udpTimeout", ipvs.UDPTimeout)
	v.positive(p+".drainTimeout", ipvs.DrainTimeout)
	switch d.ForwardingMode {
	case ForwardingNAT, ForwardingDSR:
	default:
		v.add(path+".forwardingMode", "unknown mode %q (want %s or %s)", d.ForwardingMode, ForwardingNAT, ForwardingDSR)
	}
	v.dsr(path+".dsr", &d.DSR)
}

// dsr checks the dsr mode's settings, whether or not a Service uses it
// yet: an annotation may turn it on for one Service at any time.
func (v *validator) dsr(path string, d *DSR) {
	switch d.Encapsulation {
	case EncapIPIP, EncapGUE:
	default:
		v.add(path+".encapsulation", "unknown encapsulation %q (want %s or %s)", d.Encapsulation, EncapIPIP, EncapGUE)
	}
	v.port(path+".guePort", d.GUEPort)
	// 251 is the smallest size Cilium allows (maglev.SizeFor's floor).
	if d.TableSize < 251 || !maglev.ValidSize(d.TableSize) {
		v.add(path+".tableSize", "%d: want a prime from 251 to %d (at least 100 times the nodes)", d.TableSize, maglev.MaxSize)
	}
	// An MSS below 536 (IPv4's minimum) once encapsulated is no MSS.
	if minMTU := 536 + 40 + 32; d.MTU < minMTU || d.MTU > 65535 {
		v.add(path+".mtu", "%d: want %d to 65535", d.MTU, minMTU)
	}
}

func (v *validator) detectLocal(path string, d *DetectLocal) {
	switch d.Mode {
	case LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix:
	default:
		v.add(path+".mode", "unknown mode %q (want %s, %s, %s or %s)", d.Mode,
			LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeBridgeInterface, LocalModeInterfaceNamePrefix)
		return
	}
	for _, f := range []struct{ name, value, mode string }{
		{"bridgeInterface", d.BridgeInterface, LocalModeBridgeInterface},
		{"interfaceNamePrefix", d.InterfaceNamePrefix, LocalModeInterfaceNamePrefix},
	} {
		switch {
		case d.Mode != f.mode && f.value != "":
			v.add(path+"."+f.name, "set, but mode is %s (it is read only with mode %s)", d.Mode, f.mode)
		case d.Mode == f.mode && f.value == "":
			v.add(path+"."+f.name, "required with mode %s", d.Mode)
		case d.Mode == f.mode:
			if err := interfaceName(f.value); err != nil {
				v.add(path+"."+f.name, "%v", err)
			}
		}
	}
}

// interfaceName checks a network interface name (or a prefix of one) as
// the kernel's dev_valid_name does.
func interfaceName(s string) error {
	switch {
	case len(s) > 15:
		return fmt.Errorf("%q is longer than 15 bytes, the kernel's limit for an interface name", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not an interface name", s)
	case strings.ContainsAny(s, "/: \t\n\r\v\f\x00"):
		return fmt.Errorf("%q holds a character an interface name cannot ('/', ':' or white space)", s)
	}
	return nil
}

// BuiltinAnnouncerTypes are the announcer types this package validates
// the settings of: each has a block of its own (arp, bgp, cloud).
var BuiltinAnnouncerTypes = []string{AnnouncerARP, AnnouncerBGP, AnnouncerCloud}

func isBuiltinAnnouncer(t string) bool { return slices.Contains(BuiltinAnnouncerTypes, t) }

// AnnouncerTypeCheck returns a Check that refuses an announcer whose type
// is not one of known, naming them. Validate leaves the type names to it:
// the daemon knows which types are registered (core/lb's Types.Check).
func AnnouncerTypeCheck(known ...string) Check {
	known = slices.Sorted(slices.Values(known))
	return func(c *Config) Errors {
		var errs Errors
		for i, a := range c.Announcers {
			if a.Type != "" && !slices.Contains(known, a.Type) {
				errs = append(errs, &FieldError{Path: fmt.Sprintf("announcers[%d].type", i), Msg: fmt.Sprintf("unknown type %q (want %s)", a.Type, orList(known))})
			}
		}
		return errs
	}
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// SchedulerCheck returns a Check that refuses a default scheduler
// (dataplane.ipvs.scheduler) the dataplane's set does not support, naming
// the ones it does. The daemon checks every config with the set of the
// dataplane its mode names, before that dataplane is opened.
func SchedulerCheck(set plugin.SchedulerSet) Check {
	return func(c *Config) Errors {
		name := c.Dataplane.IPVS.Scheduler
		if set.SupportsScheduler(name) {
			return nil
		}
		return Errors{{Path: "dataplane.ipvs.scheduler", Msg: fmt.Sprintf("unknown scheduler %q (want %s)", name, strings.Join(set.Schedulers(), ", "))}}
	}
}

func (v *validator) conntrack(path string, c *Conntrack) {
	for _, f := range []struct {
		name string
		n    *int
	}{{"maxPerCore", c.MaxPerCore}, {"min", c.Min}} {
		if f.n != nil && *f.n < 0 {
			v.add(path+"."+f.name, "%d is negative", *f.n)
		}
	}
	if c.TCPEstablishedTimeout != nil {
		v.seconds(path+".tcpEstablishedTimeout", *c.TCPEstablishedTimeout)
	}
	if c.TCPCloseWaitTimeout != nil {
		v.seconds(path+".tcpCloseWaitTimeout", *c.TCPCloseWaitTimeout)
	}
	v.seconds(path+".udpTimeout", c.UDPTimeout)
	v.seconds(path+".udpStreamTimeout", c.UDPStreamTimeout)
}

func (v *validator) policies(path string, p *Policies) {
	if p.Default != "" {
		v.policyName(path+".default", p.Default)
	}
	v.positive(path+".evaluationDeadline", p.EvaluationDeadline)
	if p.MemoryLimit < 1<<20 || p.MemoryLimit > 4<<30 {
		v.add(path+".memoryLimit", "%s is out of range (want 1Mi to 4Gi)", p.MemoryLimit)
	}
	v.positive(path+".statisticsInterval", p.StatisticsInterval)
	if p.Workers < 0 || p.Workers > MaxPolicyWorkers {
		v.add(path+".workers", "%d is out of range (want 0 to %d; 0 is one per CPU)", p.Workers, MaxPolicyWorkers)
	}
	if dir := p.CacheDir; dir != nil && *dir != "" && (!filepath.IsAbs(*dir) || filepath.Clean(*dir) != *dir) {
		v.add(path+".cacheDir", "invalid directory %q (want a clean absolute path, or \"\" to disable the cache)", *dir)
	}
}

func (v *validator) policyName(path, name string) {
	if b, ok := strings.CutPrefix(name, "builtin:"); ok {
		if !dnsLabel.MatchString(b) {
			v.add(path, "invalid builtin policy name %q", b)
		}
		return
	}
	if len(name) > 253 || !dns1123Subdomain.MatchString(name) {
		v.add(path, "invalid policy %q (want a ConfigMap name or builtin:<name>)", name)
	}
}

// pools validates the pools and returns their names.
func (v *validator) pools(path string, pools []Pool) map[string]bool {
	type span struct {
		path        string
		first, last netip.Addr
	}
	var spans []span
	names := make(map[string]bool, len(pools))
	for i, pool := range pools {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.name(p+".name", pool.Name, names)
		if len(pool.Addresses) == 0 {
			v.add(p+".addresses", "at least one CIDR or range is required")
		}
		for j, a := range pool.Addresses {
			ap := fmt.Sprintf("%s.addresses[%d]", p, j)
			first, last, err := ParseAddressRange(a)
			if err != nil {
				v.add(ap, "%v", err)
				continue
			}
			for _, o := range spans {
				if !last.Less(o.first) && !o.last.Less(first) {
					v.add(ap, "%q overlaps %s", a, o.path)
				}
			}
			spans = append(spans, span{ap, first, last})
		}
		for j, ns := range pool.Namespaces {
			if !dnsLabel.MatchString(ns) {
				v.add(fmt.Sprintf("%s.namespaces[%d]", p, j), "invalid namespace %q", ns)
			}
		}
		for j, s := range pool.NamespaceSelectors {
			v.selector(fmt.Sprintf("%s.namespaceSelectors[%d]", p, j), s)
		}
		for j, s := range pool.ServiceSelectors {
			v.selector(fmt.Sprintf("%s.serviceSelectors[%d]", p, j), s)
		}
	}
	return names
}

func (v *validator) selector(path string, s LabelSelector) {
	v.labels(path+".matchLabels", s.MatchLabels)
	for i, r := range s.MatchExpressions {
		p := fmt.Sprintf("%s.matchExpressions[%d]", path, i)
		if r.Key == "" {
			v.add(p+".key", "required")
		}
		switch r.Operator {
		case "In", "NotIn":
			if len(r.Values) == 0 {
				v.add(p+".values", "required for operator %s", r.Operator)
			}
		case "Exists", "DoesNotExist":
			if len(r.Values) > 0 {
				v.add(p+".values", "must be empty for operator %s", r.Operator)
			}
		default:
			v.add(p+".operator", "unknown operator %q (want In, NotIn, Exists or DoesNotExist)", r.Operator)
		}
	}
}

func (v *validator) announcers(path string, as []Announcer, pools map[string]bool) {
	names := make(map[string]bool, len(as))
	for i, a := range as {
		p := fmt.Sprintf("%s[%d]", path, i)
		v.name(p+".name", a.Name, names)
		for j, pool := range a.Pools {
			if !pools[pool] {
				v.add(fmt.Sprintf("%s.pools[%d]", p, j), "unknown pool %q", pool)
			}
		}
		v.labels(p+".nodeSelector", a.NodeSelector)
		blocks := map[string]bool{AnnouncerARP: a.ARP != nil, AnnouncerBGP: a.BGP != nil, AnnouncerCloud: a.Cloud != nil}
		if a.Type == "" {
			v.add(p+".type", "required")
		}
		for _, t := range BuiltinAnnouncerTypes {
			if blocks[t] && t != a.Type {
				v.add(p+"."+t, "set, but type is %q", a.Type)
			}
		}
		if a.Settings != nil && isBuiltinAnnouncer(a.Type) {
			v.add(p+".settings", "set, but type %q takes its settings in %q", a.Type, a.Type)
		}
		switch {
		case a.Type == AnnouncerBGP && a.BGP == nil:
			v.add(p+".bgp", "required for type bgp")
		case a.Type == AnnouncerCloud && a.Cloud == nil:
			v.add(p+".cloud", "required for type cloud")
		}
		if a.Type == AnnouncerBGP && a.BGP != nil {
			v.bgp(p+".bgp", a.BGP)
		}
		if a.Type == AnnouncerCloud && a.Cloud != nil {
			v.cloud(p+".cloud", a.Cloud)
		}
	}
}

func (v *validator) bgp(path string, b *BGPAnnouncer) {
	if b.ASN == 0 {
		v.add(path+".asn", "required")
	}
	if b.RouterID != "" {
		if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() {
			v.add(path+".routerID", "invalid router ID %q (want an IPv4 address)", b.RouterID)
		}
	}
	if b.ListenPort != 0 {
		v.port(path+".listenPort", b.ListenPort)
	}
	if gr := b.GracefulRestart; gr != nil {
		if gr.RestartTime < Duration(time.Second) || gr.RestartTime > maxRestartTime || gr.RestartTime%Duration(time.Second) != 0 {
			v.add(path+".gracefulRestart.restartTime", "%s is out of range (want whole seconds from 1s to %s)", gr.RestartTime, maxRestartTime)
		}
	}
	if len(b.Peers) == 0 {
		v.add(path+".peers", "at least one peer is required")
	}
	for i, peer := range b.Peers {
		p := fmt.Sprintf("%s.peers[%d]", path, i)
		if _, err := netip.ParseAddr(peer.Address); err != nil {
			v.add(p+".address", "invalid IP address %q", peer.Address)
		}
		if peer.ASN == 0 {
			v.add(p+".asn", "required")
		}
		v.port(p+".port", peer.Port)
		if peer.HoldTime < Duration(3*time.Second) {
			v.add(p+".holdTime", "%s is shorter than 3s", peer.HoldTime)
		}
		if peer.KeepaliveTime <= 0 || peer.KeepaliveTime >= peer.HoldTime {
			v.add(p+".keepaliveTime", "%s is not between 0s and holdTime %s", peer.KeepaliveTime, peer.HoldTime)
		}
		if s := peer.PasswordSecret; s != nil {
			v.secretRef(p+".passwordSecret", s)
			if peer.PasswordFile != "" {
				v.add(p+".passwordFile", "set passwordSecret or passwordFile, not both")
			}
		}
		if peer.EBGPMultihop < 0 || peer.EBGPMultihop > 255 {
			v.add(p+".ebgpMultihop", "%d is out of range (want 0 to 255)", peer.EBGPMultihop)
		}
		if b := peer.BFD; b != nil {
			v.bfd(p+".bfd", b)
		}
		v.labels(p+".nodeSelector", peer.NodeSelector)
		for j, c := range peer.Communities {
			if !validCommunity(c) {
				v.add(fmt.Sprintf("%s.communities[%d]", p, j), "invalid community %q (want ASN:value, each 0 to 65535)", c)
			}
		}
	}
}

func (v *validator) membership(path string, m *Membership) {
	v.ipAddr(path+".bindAddress", m.BindAddress)
	v.port(path+".port", m.Port)
	if ref := m.SecretKeySecret; ref != nil {
		v.secretRef(path+".secretKeySecret", ref)
		if m.SecretKeyFile != "" {
			v.add(path+".secretKeyFile", "set secretKeySecret or secretKeyFile, not both")
		}
	}
	if m.ProbeInterval < minProbeInterval || m.ProbeInterval > maxProbeInterval {
		v.add(path+".probeInterval", "%s is out of range (want %s to %s)", m.ProbeInterval, minProbeInterval, maxProbeInterval)
	}
	switch {
	case m.ProbeTimeout <= 0:
		v.add(path+".probeTimeout", "%s is not positive", m.ProbeTimeout)
	case m.ProbeTimeout >= m.ProbeInterval:
		// The rest of the interval is the indirect probes' time.
		v.add(path+".probeTimeout", "%s is not shorter than probeInterval %s", m.ProbeTimeout, m.ProbeInterval)
	}
	if m.SuspicionMult < 1 || m.SuspicionMult > maxSuspicionMult {
		v.add(path+".suspicionMult", "%d is out of range (want 1 to %d)", m.SuspicionMult, maxSuspicionMult)
	}
	if g := m.RestartGrace; g != nil && (*g < 0 || *g > maxRestartGrace) {
		v.add(path+".restartGrace", "%s is out of range (want 0 to %s)", *g, maxRestartGrace)
	}
}

// Failure detector limits: below 10ms a probe is mostly scheduling
// noise; above a minute, or a suspicion of 20 intervals, a dead node
// keeps its addresses for longer than Kubernetes takes to mark it
// NotReady, the fallback.
const (
	minProbeInterval = Duration(10 * time.Millisecond)
	maxProbeInterval = Duration(time.Minute)
	maxSuspicionMult = 20
)

// maxRestartGrace bounds membership.restartGrace: a daemon that takes
// longer to come back is not restarting, and its addresses, held by
// nobody answering, should move.
const maxRestartGrace = Duration(10 * time.Minute)

// maxRestartTime is the longest graceful restart time: the capability
// carries it in 12 bits of seconds (RFC 4724).
const maxRestartTime = Duration(4095 * time.Second)

// BFD interval limits: below 10ms no software implementation keeps up;
// intervals travel in whole microseconds.
const (
	minBFDInterval = Duration(10 * time.Millisecond)
	maxBFDInterval = Duration(time.Minute)
)

func (v *validator) bfd(path string, b *BGPPeerBFD) {
	for _, iv := range []struct {
		name string
		d    Duration
	}{{"minRx", b.MinRx}, {"minTx", b.MinTx}} {
		if iv.d < minBFDInterval || iv.d > maxBFDInterval || iv.d%Duration(time.Microsecond) != 0 {
			v.add(path+"."+iv.name, "%s is out of range (want whole microseconds from %s to %s)", iv.d, minBFDInterval, maxBFDInterval)
		}
	}
	if b.Multiplier < 1 || b.Multiplier > 255 {
		v.add(path+".multiplier", "%d is out of range (want 1 to 255)", b.Multiplier)
	}
}

// secretRef checks a Secret key reference.
func (v *validator) secretRef(path string, s *SecretKeyRef) {
	if !dns1123Subdomain.MatchString(s.Name) {
		v.add(path+".name", "invalid Secret name %q", s.Name)
	}
	if s.Key == "" {
		v.add(path+".key", "required")
	}
}

func validCommunity(c string) bool {
	hi, lo, ok := strings.Cut(c, ":")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(hi, 10, 16)
	_, err2 := strconv.ParseUint(lo, 10, 16)
	return err1 == nil && err2 == nil
}

func (v *validator) cloud(path string, c *CloudAnnouncer) {
	u, err := url.Parse(c.URL)
	if c.URL == "" {
		v.add(path+".url", "required")
	} else if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(path+".url", "invalid URL %q (want an absolute http or https URL)", c.URL)
	}
	v.positive(path+".timeout", c.Timeout)
}

func (v *validator) name(path, name string, seen map[string]bool) {
	switch {
	case name == "":
		v.add(path, "required")
	case !dnsLabel.MatchString(name):
		v.add(path, "invalid name %q (want a DNS label: lower-case letters, digits and '-')", name)
	case seen[name]:
		v.add(path, "duplicate name %q", name)
	}
	seen[name] = true
}

func (v *validator) labels(path string, labels map[string]string) {
	for k := range labels {
		if k == "" || len(k) > 317 || strings.ContainsAny(k, " \t\n,=") {
			v.add(path, "invalid label key %q", k)
		}
	}
}

func (v *validator) qualifiedName(path, s string) {
	prefix, name, ok := strings.Cut(s, "/")
	if !ok {
		prefix, name = "", s
	}
	if name == "" || len(name) > 63 || (ok && !dns1123Subdomain.MatchString(prefix)) ||
		!labelName.MatchString(name) {
		v.add(path, "invalid class %q (want a qualified name such as %q)", s, DefaultLoadBalancerClass)
	}
}

// labelValue checks a non-empty label value: at most 63 characters,
// alphanumeric at both ends, dashes, underscores and dots inside.
func (v *validator) labelValue(path, s string) {
	if s == "" || len(s) > 63 || !labelName.MatchString(s) {
		v.add(path, "invalid label value %q (want up to 63 letters, digits, '-', '_' or '.', alphanumeric at both ends)", s)
	}
}

func (v *validator) positive(path string, d Duration) {
	if d <= 0 {
		v.add(path, "%s is not positive", d)
	}
}

// seconds checks a timeout the kernel takes in whole seconds.
func (v *validator) seconds(path string, d Duration) {
	switch {
	case d < 0:
		v.add(path, "%s is negative", d)
	case d.Std()%time.Second != 0:
		v.add(path, "%s is not a whole number of seconds", d)
	}
}

func (v *validator) port(path string, port int) {
	if port < 1 || port > 65535 {
		v.add(path, "port %d is out of range (want 1 to 65535)", port)
	}
}

func (v *validator) ipAddr(path, s string) {
	if _, err := netip.ParseAddr(s); err != nil {
		v.add(path, "invalid IP address %q", s)
	}
}

func (v *validator) hostPort(path, s, example string) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		v.add(path, "invalid address %q (want host:port, such as %q)", s, example)
		return
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			v.add(path, "invalid address %q: host %q is not an IP address", s, host)
		}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "invalid address %q: bad port %q", s, port)
	}
}

// ParseAddressRange parses a pool entry: a CIDR ("192.0.2.0/28") or an
// inclusive range of one family ("192.0.2.10-192.0.2.20"), and returns
// its first and last addresses.
func ParseAddressRange(s string) (first, last netip.Addr, err error) {
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		var err1, err2 error
		first, err1 = netip.ParseAddr(strings.TrimSpace(lo))
		last, err2 = netip.ParseAddr(strings.TrimSpace(hi))
		switch {
		case err1 != nil || err2 != nil || !plainAddr(first) || !plainAddr(last):
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid range %q (want first-last)", s)
		case first.Is4() != last.Is4():
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid range %q: mixes IPv4 and IPv6", s)
		case last.Less(first):
			return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid range %q: last address before first", s)
		}
		return first, last, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !plainAddr(p.Addr()) {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid CIDR or range %q", s)
	}
	if p != p.Masked() {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("invalid CIDR %q: host bits set (want %s)", s, p.Masked())
	}
	first = p.Addr()
	last = lastAddr(p)
	return first, last, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		switch {
		case bits >= 8:
			bits -= 8
		case bits > 0:
			b[i] |= 0xff >> bits
			bits = 0
		default:
			b[i] = 0xff
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// plainAddr rejects zoned and IPv4-mapped IPv6 addresses: in a pool they
// are typing mistakes.
func plainAddr(a netip.Addr) bool { return a.Zone() == "" && !a.Is4In6() }

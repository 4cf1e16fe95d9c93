package config

import "time"

// Default values; each is documented on the field it fills.
const (
	DefaultMode               = ModeIPVS
	DefaultScheduler          = "rr"
	DefaultSyncPeriod         = 30 * time.Second
	DefaultMinSyncPeriod      = time.Second
	DefaultDrainTimeout       = 15 * time.Minute
	DefaultEvaluationDeadline = 50 * time.Millisecond
	DefaultMemoryLimit        = 32 << 20
	DefaultStatisticsInterval = 10 * time.Second
	DefaultPolicyCacheDir     = "/var/cache/switchyard/wasm"
	DefaultBGPPort            = 179
	DefaultHoldTime           = 90 * time.Second
	DefaultBFDInterval        = 300 * time.Millisecond
	DefaultBFDMultiplier      = 3
	DefaultRestartTime        = 120 * time.Second
	DefaultCloudTimeout       = 10 * time.Second
	DefaultMembershipAddress  = "0.0.0.0"
	DefaultMembershipPort     = 7946
	DefaultProbeInterval      = 100 * time.Millisecond
	DefaultProbeTimeout       = 50 * time.Millisecond
	DefaultSuspicionMult      = 3
	DefaultRestartGrace       = 30 * time.Second
	DefaultMetricsAddress     = "127.0.0.1:10249"
	DefaultHealthAddress      = "0.0.0.0:10256"
	DefaultLoadBalancerClass  = "switchyard.dev/lb"
	DefaultServiceProxyName   = "switchyard"

	DefaultForwardingMode   = ForwardingNAT
	DefaultDSREncapsulation = EncapIPIP
	DefaultDSRGUEPort       = 6080
	DefaultDSRSeed          = 0x5eed
	DefaultDSRTableSize     = 16381
	DefaultDSRMTU           = 1500

	DefaultConntrackMaxPerCore            = 32768
	DefaultConntrackMin                   = 131072
	DefaultConntrackTCPEstablishedTimeout = 24 * time.Hour
	DefaultConntrackTCPCloseWaitTimeout   = time.Hour
)

// MaxPolicyWorkers bounds policies.workers.
const MaxPolicyWorkers = 256

// Default returns the configuration used when the file sets nothing.
func Default() *Config {
	c := &Config{APIVersion: APIVersion, Kind: Kind}
	c.SetDefaults()
	return c
}

// SetDefaults fills every unset field with its documented default. It is
// the only place defaults are applied.
func (c *Config) SetDefaults() {
	setString(&c.Dataplane.Mode, DefaultMode)
	setDuration(&c.Dataplane.SyncPeriod, DefaultSyncPeriod)
	setDuration(&c.Dataplane.MinSyncPeriod, DefaultMinSyncPeriod)
	if c.Dataplane.DetectLocal.Mode == "" {
		c.Dataplane.DetectLocal.Mode = LocalModeNodeCIDR
		if len(c.Dataplane.ClusterCIDRs) > 0 {
			c.Dataplane.DetectLocal.Mode = LocalModeClusterCIDR
		}
	}
	setString(&c.Dataplane.ForwardingMode, DefaultForwardingMode)
	dsr := &c.Dataplane.DSR
	setString(&dsr.Encapsulation, DefaultDSREncapsulation)
	if dsr.GUEPort == 0 {
		dsr.GUEPort = DefaultDSRGUEPort
	}
	if dsr.Seed == 0 {
		dsr.Seed = DefaultDSRSeed
	}
	if dsr.TableSize == 0 {
		dsr.TableSize = DefaultDSRTableSize
	}
	if dsr.MTU == 0 {
		dsr.MTU = DefaultDSRMTU
	}
	ipvs := &c.Dataplane.IPVS
	setString(&ipvs.Scheduler, DefaultScheduler)
	setBool(&ipvs.StrictARP, true)
	setDuration(&ipvs.DrainTimeout, DefaultDrainTimeout)

	ct := &c.Conntrack
	setInt(&ct.MaxPerCore, DefaultConntrackMaxPerCore)
	setInt(&ct.Min, DefaultConntrackMin)
	setDurationPtr(&ct.TCPEstablishedTimeout, DefaultConntrackTCPEstablishedTimeout)
	setDurationPtr(&ct.TCPCloseWaitTimeout, DefaultConntrackTCPCloseWaitTimeout)

	p := &c.Policies
	setDuration(&p.EvaluationDeadline, DefaultEvaluationDeadline)
	if p.MemoryLimit == 0 {
		p.MemoryLimit = DefaultMemoryLimit
	}
	setDuration(&p.StatisticsInterval, DefaultStatisticsInterval)
	if p.CacheDir == nil {
		dir := DefaultPolicyCacheDir
		p.CacheDir = &dir
	}

	for i := range c.Pools {
		setBool(&c.Pools[i].AutoAssign, true)
	}
	for i := range c.Announcers {
		a := &c.Announcers[i]
		if a.BGP != nil {
			if gr := a.BGP.GracefulRestart; gr != nil {
				setDuration(&gr.RestartTime, DefaultRestartTime)
			}
			for j := range a.BGP.Peers {
				peer := &a.BGP.Peers[j]
				if peer.Port == 0 {
					peer.Port = DefaultBGPPort
				}
				setDuration(&peer.HoldTime, DefaultHoldTime)
				setDuration(&peer.KeepaliveTime, time.Duration(peer.HoldTime)/3)
				if b := peer.BFD; b != nil {
					setDuration(&b.MinRx, DefaultBFDInterval)
					setDuration(&b.MinTx, DefaultBFDInterval)
					if b.Multiplier == 0 {
						b.Multiplier = DefaultBFDMultiplier
					}
				}
			}
		}
		if a.Cloud != nil {
			setDuration(&a.Cloud.Timeout, DefaultCloudTimeout)
		}
	}

	setString(&c.Membership.BindAddress, DefaultMembershipAddress)
	setBool(&c.Membership.QuorumGuard, true)
	if c.Membership.Port == 0 {
		c.Membership.Port = DefaultMembershipPort
	}
	setDuration(&c.Membership.ProbeInterval, DefaultProbeInterval)
	setDuration(&c.Membership.ProbeTimeout, DefaultProbeTimeout)
	if c.Membership.SuspicionMult == 0 {
		c.Membership.SuspicionMult = DefaultSuspicionMult
	}
	setDurationPtr(&c.Membership.RestartGrace, DefaultRestartGrace)
	setString(&c.Metrics.BindAddress, DefaultMetricsAddress)
	setString(&c.Health.BindAddress, DefaultHealthAddress)
	setString(&c.LoadBalancerClass, DefaultLoadBalancerClass)
	setString(&c.ServiceProxyName, DefaultServiceProxyName)
}

func setString(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setBool(p **bool, v bool) {
	if *p == nil {
		*p = &v
	}
}

func setDuration(p *Duration, v time.Duration) {
	if *p == 0 {
		*p = Duration(v)
	}
}

func setInt(p **int, v int) {
	if *p == nil {
		*p = &v
	}
}

func setDurationPtr(p **Duration, v time.Duration) {
	if *p == nil {
		d := Duration(v)
		*p = &d
	}
}

// Package tuning owns the node preparation the IPVS dataplane needs once
// per start, `switchyard --set-sysctls` (the DaemonSet's privileged init
// container, since the daemon's own container sees /proc/sys read-only):
// loading ip_vs, the kernel parameters of ipvs.SysctlSettings, and the
// config's conntrack section converted to an ipvs.ConntrackTuning and
// applied as kube-proxy does, nf_conntrack_max then the nf_conntrack
// module's hashsize raised to a quarter of it.
//
// Apply reports what it did (Result) and logs nothing; cmd/switchyard
// logs the report. A read-only /sys only keeps the hashsize as it is (a
// warning in the Result); an nf_conntrack_max the kernel refuses outside
// the host's network namespace fails with the fix named.
package tuning

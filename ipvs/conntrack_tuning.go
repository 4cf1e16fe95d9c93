package ipvs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ConntrackTuning is the connection-tracking tuning kube-proxy applies at
// start (its KubeProxyConntrackConfiguration): a zero field leaves the
// kernel's value.
type ConntrackTuning struct {
	// MaxPerCore times the node's CPUs, at least Min, is nf_conntrack_max.
	MaxPerCore, Min int
	// The timeouts, whole seconds: nf_conntrack_tcp_timeout_established,
	// _tcp_timeout_close_wait, _udp_timeout and _udp_timeout_stream.
	TCPEstablishedTimeout, TCPCloseWaitTimeout time.Duration
	UDPTimeout, UDPStreamTimeout               time.Duration
}

// ConntrackMaxSysctl is the table's size limit, by /proc/sys path.
const ConntrackMaxSysctl = "net/netfilter/nf_conntrack_max"

// ConntrackParams is where the nf_conntrack module's parameters are: a
// Sysctls rooted here reads and writes "hashsize".
const ConntrackParams = "/sys/module/nf_conntrack/parameters"

// Max returns nf_conntrack_max for a node with cpus CPUs: MaxPerCore
// times cpus, at least Min; 0 (leave it) when MaxPerCore is 0.
func (t ConntrackTuning) Max(cpus int) int {
	if t.MaxPerCore <= 0 {
		return 0
	}
	return max(t.MaxPerCore*max(cpus, 1), t.Min)
}

// Settings returns the parameters t sets on a node with cpus CPUs:
// nf_conntrack_max and the non-zero timeouts. They exist once the
// nf_conntrack module is loaded (ip_vs needs it).
func (t ConntrackTuning) Settings(cpus int) []SysctlSetting {
	var s []SysctlSetting
	if m := t.Max(cpus); m > 0 {
		s = append(s, SysctlSetting{Name: ConntrackMaxSysctl, Value: strconv.Itoa(m)})
	}
	for _, tm := range []struct {
		name string
		d    time.Duration
	}{
		{"tcp_timeout_established", t.TCPEstablishedTimeout},
		{"tcp_timeout_close_wait", t.TCPCloseWaitTimeout},
		{"udp_timeout", t.UDPTimeout},
		{"udp_timeout_stream", t.UDPStreamTimeout},
	} {
		if tm.d > 0 {
			s = append(s, SysctlSetting{Name: "net/netfilter/nf_conntrack_" + tm.name, Value: strconv.Itoa(int(tm.d / time.Second))})
		}
	}
	return s
}

// EnsureConntrackHashsize raises the nf_conntrack module's hashsize (its
// hash table's buckets) to a quarter of limit when it is smaller, as
// kube-proxy does after it sets nf_conntrack_max to limit; params is a
// Sysctls rooted at ConntrackParams. It returns the change, nil when there
// was none to make.
func EnsureConntrackHashsize(params Sysctls, limit int) (*SysctlChange, error) {
	cur, err := params.Get("hashsize")
	if err != nil {
		return nil, fmt.Errorf("ipvs: conntrack hashsize: %w", err)
	}
	n, err := strconv.Atoi(cur)
	if err != nil {
		return nil, fmt.Errorf("ipvs: conntrack hashsize %q: %w", cur, err)
	}
	if n >= limit/4 {
		return nil, nil
	}
	want := strconv.Itoa(limit / 4)
	if err := params.Set("hashsize", want); err != nil {
		return nil, fmt.Errorf("ipvs: conntrack hashsize: %w", err)
	}
	return &SysctlChange{Name: "hashsize", Value: want, Was: cur}, nil
}

// IsReadOnly reports whether err is a write refused by a read-only file
// system, as /sys is in an unprivileged container.
func IsReadOnly(err error) bool { return errors.Is(err, syscall.EROFS) }

// OnlineCPUs counts the node's online CPUs from sysfs
// (<sys>/devices/system/cpu/online), which, unlike runtime.NumCPU, does
// not shrink with the process's CPU affinity (kube-proxy reads sysfs for
// the same reason).
func OnlineCPUs(sys string) (int, error) {
	b, err := os.ReadFile(filepath.Join(sys, "devices/system/cpu/online"))
	if err != nil {
		return 0, fmt.Errorf("ipvs: online CPUs: %w", err)
	}
	n, err := countCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("ipvs: online CPUs: %w", err)
	}
	return n, nil
}

// countCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11".
func countCPUList(list string) (int, error) {
	n := 0
	for part := range strings.SplitSeq(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("CPU list %q: %w", list, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("CPU list %q: %w", list, err)
			}
		}
		if first < 0 || last < first {
			return 0, fmt.Errorf("CPU list %q: bad range %q", list, part)
		}
		n += last - first + 1
	}
	return n, nil
}

package kpbench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MetricSum adds up the samples of the named metric in Prometheus text
// format: the count of a histogram ("x_duration_seconds_count") or a
// counter split by label. A non-empty label (`ip_family="IPv4"`) keeps
// only the samples carrying that exact label pair (or those pairs, comma
// separated: `policy="p",result="success"`). found is false when no
// sample matched.
func MetricSum(r io.Reader, name, label string) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		labels := ""
		if strings.HasPrefix(rest, "{") {
			i := strings.LastIndexByte(rest, '}')
			if i < 0 {
				return 0, false, fmt.Errorf("metric line with unterminated labels: %q", line)
			}
			labels, rest = rest[1:i], rest[i+1:]
		}
		if label != "" && !hasLabel(labels, label) {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("metric line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("read metrics: %w", err)
	}
	return sum, found, nil
}

// hasLabel reports whether a sample's label set ("a=\"x\",b=\"y\"") holds
// every pair of want (b="y", or several comma separated). Label values
// with commas inside quotes are rare enough in these metrics to be left
// out.
func hasLabel(labels, want string) bool {
	have := strings.Split(labels, ",")
	for _, w := range strings.Split(want, ",") {
		if !slices.ContainsFunc(have, func(l string) bool { return strings.TrimSpace(l) == strings.TrimSpace(w) }) {
			return false
		}
	}
	return true
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// ParseStatCPU returns the CPU time in /proc/PID/stat: user and system
// time of the process and of its children it waited for (kube-proxy's
// iptables-restore and ipset runs).
func ParseStatCPU(stat string) (time.Duration, error) {
	// The command name may hold spaces and parentheses: fields start
	// after its last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/PID/stat %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime, cstime are 14..17.
	if len(f) < 15 {
		return 0, fmt.Errorf("short /proc/PID/stat %q", stat)
	}
	var ticks int64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/PID/stat time %q: %w", s, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// ParseStatusMemory returns VmRSS and VmHWM (peak RSS) from
// /proc/PID/status, in bytes.
func ParseStatusMemory(status string) (rss, peak int64, err error) {
	for _, line := range strings.Split(status, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("/proc/PID/status: unexpected %q", line)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/PID/status %q: %w", line, err)
		}
		if k == "VmRSS" {
			rss = n << 10
		} else {
			peak = n << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/PID/status has no VmRSS")
	}
	return rss, peak, nil
}

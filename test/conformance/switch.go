package conformance

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sample is one request made while a node switches proxies: when it was
// sent and whether it was answered.
type Sample struct {
	At time.Time
	OK bool
}

// Outage is what a series of samples says about the service.
type Outage struct {
	Requests int
	Failed   int
	// Without is the time without service: from the last answered
	// request before the first failure to the first answered one after
	// the last failure (from the first sample when none was answered
	// before, to the last when none was after). Zero when none failed.
	Without time.Duration
	// Recovered is false when the last request failed.
	Recovered bool
}

// MarshalJSON writes Without in seconds.
func (o Outage) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Requests       int     `json:"requests"`
		Failed         int     `json:"failed"`
		WithoutSeconds float64 `json:"withoutSeconds"`
		Recovered      bool    `json:"recovered"`
	}{o.Requests, o.Failed, o.Without.Seconds(), o.Recovered})
}

func (o Outage) String() string {
	s := fmt.Sprintf("%d of %d requests failed, %s without service", o.Failed, o.Requests, o.Without.Round(100*time.Millisecond))
	if !o.Recovered {
		s += ", not recovered"
	}
	return s
}

// MeasureOutage reads samples (in the order they were sent).
func MeasureOutage(samples []Sample) Outage {
	o := Outage{Requests: len(samples), Recovered: len(samples) > 0 && samples[len(samples)-1].OK}
	first, last := -1, -1
	for i, s := range samples {
		if !s.OK {
			o.Failed++
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return o
	}
	from, to := samples[0].At, samples[len(samples)-1].At
	for i := first - 1; i >= 0; i-- {
		if samples[i].OK {
			from = samples[i].At
			break
		}
	}
	for i := last + 1; i < len(samples); i++ {
		if samples[i].OK {
			to = samples[i].At
			break
		}
	}
	o.Without = to.Sub(from)
	return o
}

// ParseGuestSamples reads the log of the guest's request loop
// (switchSamplerScript): one "UNIXSECONDS.NANOS 1|0" line per request.
func ParseGuestSamples(log string) ([]Sample, error) {
	var out []Sample
	for i, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 || (f[1] != "0" && f[1] != "1") {
			return nil, fmt.Errorf("conformance: request log line %d: %q", i+1, line)
		}
		sec, frac, _ := strings.Cut(f[0], ".")
		s, err := strconv.ParseInt(sec, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("conformance: request log line %d: %w", i+1, err)
		}
		var ns int64
		if frac != "" {
			frac = (frac + "000000000")[:9]
			if ns, err = strconv.ParseInt(frac, 10, 64); err != nil {
				return nil, fmt.Errorf("conformance: request log line %d: %w", i+1, err)
			}
		}
		out = append(out, Sample{At: time.Unix(s, ns), OK: f[1] == "1"})
	}
	return out, nil
}

// KernelState is what a node's kernel holds of the service proxies'
// objects, as kernelStateScript prints it.
type KernelState struct {
	Links    []string `json:"links"`
	IPSets   []string `json:"ipsets"`
	Chains   []string `json:"chains"`   // "ipv4 nat KUBE-SERVICES" (iptables-save, ip6tables-save)
	NFTables []string `json:"nftables"` // "inet switchyard" (nft list tables)
	IPVS     []string `json:"ipvs"`     // ipvsadm -Sn's "-A" lines: the virtual services
}

// kernelStateScript prints the sections ParseKernelState reads; a tool
// that fails fails the script (a state it cannot read proves nothing).
const kernelStateScript = `set -e
echo '== links'; ip -o link show | cut -d: -f2 | cut -d@ -f1
echo '== ipsets'; ipset list -n
echo '== iptables ipv4'; s=$(iptables-save); echo "$s" | grep -E '^[*:]' || true
echo '== iptables ipv6'; s=$(ip6tables-save); echo "$s" | grep -E '^[*:]' || true
echo '== nft'; nft list tables
echo '== ipvs'; s=$(ipvsadm -Sn); echo "$s" | grep '^-A' || true`

// ParseKernelState reads kernelStateScript's output.
func ParseKernelState(out string) (KernelState, error) {
	var (
		k             KernelState
		section, fam  string
		table         string
		sectionsFound int
	)
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if h, ok := strings.CutPrefix(line, "== "); ok {
			section, table = h, ""
			fam, _ = strings.CutPrefix(h, "iptables ")
			if fam != h {
				section = "iptables"
			}
			sectionsFound++
			continue
		}
		switch section {
		case "links":
			k.Links = append(k.Links, line)
		case "ipsets":
			k.IPSets = append(k.IPSets, line)
		case "iptables":
			if t, ok := strings.CutPrefix(line, "*"); ok {
				table = t
			} else if c, ok := strings.CutPrefix(line, ":"); ok && table != "" {
				k.Chains = append(k.Chains, fam+" "+table+" "+strings.Fields(c)[0])
			} else {
				return KernelState{}, fmt.Errorf("conformance: kernel state: iptables line %q", line)
			}
		case "nft":
			t, ok := strings.CutPrefix(line, "table ")
			if !ok {
				return KernelState{}, fmt.Errorf("conformance: kernel state: nft line %q", line)
			}
			k.NFTables = append(k.NFTables, t)
		case "ipvs":
			if !strings.HasPrefix(line, "-A ") {
				return KernelState{}, fmt.Errorf("conformance: kernel state: ipvsadm line %q", line)
			}
			k.IPVS = append(k.IPVS, line)
		default:
			return KernelState{}, fmt.Errorf("conformance: kernel state: line %q outside a section", line)
		}
	}
	if sectionsFound != 6 {
		return KernelState{}, fmt.Errorf("conformance: kernel state: %d of 6 sections in %q", sectionsFound, out)
	}
	return k, nil
}

// KubeProxyLeft lists what is left in after of kube-proxy's objects:
// kube-ipvs0, KUBE-* ipsets, the kube-proxy nftables tables, any IPVS
// service (nothing else on the node makes them), and the KUBE-* iptables
// chains that were not in before, the node before kube-proxy ever ran
// (the kubelet makes a few of its own: KUBE-IPTABLES-HINT,
// KUBE-KUBELET-CANARY, KUBE-FIREWALL).
func KubeProxyLeft(before, after KernelState) []string {
	var left []string
	if slices.Contains(after.Links, "kube-ipvs0") {
		left = append(left, "link kube-ipvs0")
	}
	for _, s := range after.IPSets {
		if strings.HasPrefix(s, "KUBE-") {
			left = append(left, "ipset "+s)
		}
	}
	for _, c := range after.Chains {
		if strings.Contains(c, " KUBE-") && !slices.Contains(before.Chains, c) {
			left = append(left, "iptables chain "+c)
		}
	}
	for _, t := range after.NFTables {
		if strings.HasSuffix(t, " kube-proxy") {
			left = append(left, "nftables table "+t)
		}
	}
	return append(left, ipvsLeft(after)...)
}

// SwitchyardLeft lists what is left in k of Switchyard's objects: its
// dummy links, nftables tables and any IPVS service.
func SwitchyardLeft(k KernelState) []string {
	var left []string
	for _, l := range k.Links {
		if strings.HasPrefix(l, "switchyard") {
			left = append(left, "link "+l)
		}
	}
	for _, t := range k.NFTables {
		if _, name, _ := strings.Cut(t, " "); strings.HasPrefix(name, "switchyard") {
			left = append(left, "nftables table "+t)
		}
	}
	return append(left, ipvsLeft(k)...)
}

func ipvsLeft(k KernelState) []string {
	var left []string
	for _, s := range k.IPVS {
		left = append(left, "IPVS service "+strings.TrimSpace(strings.TrimPrefix(s, "-A")))
	}
	return left
}

package cleanup

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// iptablesTables are the tables kube-proxy writes.
var iptablesTables = []string{"nat", "filter", "mangle"}

// kubeletChains are KUBE-* chains the kubelet makes, which kube-proxy's
// cleanup leaves too, by table ("" for every table).
var kubeletChains = map[string][]string{
	"":       {"KUBE-KUBELET-CANARY"},
	"mangle": {"KUBE-IPTABLES-HINT"},
	"filter": {"KUBE-FIREWALL"},
	"nat":    {"KUBE-MARK-DROP"},
}

// iptablesFamily is one iptables command set.
type iptablesFamily struct{ name, save, restore string }

var iptablesFamilies = []iptablesFamily{
	{"IPv4", "iptables-save", "iptables-restore"},
	{"IPv6", "ip6tables-save", "ip6tables-restore"},
}

// kubeProxyIPTables removes kube-proxy's chains, and the jumps to them,
// from every table of both families, one iptables-restore per table.
func kubeProxyIPTables(ctx context.Context, tools Tools, r *Report) error {
	for _, fam := range iptablesFamilies {
		for _, table := range iptablesTables {
			out, err := tools.Run(ctx, nil, fam.save, "-t", table)
			if missing(err) {
				r.Skipped = append(r.Skipped, fmt.Sprintf("iptables %s: %s is not installed", fam.name, fam.save))
				break
			}
			if err != nil {
				return fmt.Errorf("cleanup: %s -t %s: %w", fam.save, table, err)
			}
			p := planIPTables(table, out)
			if p.input == nil {
				continue
			}
			if _, err := tools.Run(ctx, p.input, fam.restore, "--noflush", "-w", "5"); err != nil {
				return fmt.Errorf("cleanup: %s (table %s): %w", fam.restore, table, err)
			}
			for _, c := range p.chains {
				r.removed("iptables %s chain %s %s", fam.name, table, c)
			}
			for _, j := range p.jumps {
				r.removed("iptables %s rule %s %s", fam.name, table, j)
			}
		}
	}
	return nil
}

// iptablesPlan is what to remove from one table.
type iptablesPlan struct {
	// chains are the chains to flush and delete; jumps the rules of the
	// other chains that jump to them ("CHAIN rule-spec", as saved).
	chains, jumps []string
	// input is the iptables-restore --noflush input doing it, nil when
	// there is nothing to remove.
	input []byte
}

// planIPTables plans the removal of kube-proxy's chains from the
// iptables-save output of one table: every KUBE-* chain but the
// kubelet's, and every rule of another chain that jumps (-j or -g) to
// one of them. Declaring a chain in a --noflush restore flushes it, so
// rules between removed chains go with them.
func planIPTables(table string, save []byte) iptablesPlan {
	var p iptablesPlan
	var rules [][2]string // chain, spec
	sc := bufio.NewScanner(bytes.NewReader(save))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if strings.HasPrefix(name, "KUBE-") && !slices.Contains(kubeletChains[""], name) &&
				!slices.Contains(kubeletChains[table], name) {
				p.chains = append(p.chains, name)
			}
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			rules = append(rules, [2]string{chain, spec})
		}
	}
	if len(p.chains) == 0 {
		return p
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%s\n", table)
	for _, c := range p.chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, rule := range rules {
		if slices.Contains(p.chains, rule[0]) || !slices.Contains(p.chains, jumpTarget(rule[1])) {
			continue
		}
		p.jumps = append(p.jumps, rule[0]+" "+rule[1])
		fmt.Fprintf(&b, "-D %s %s\n", rule[0], rule[1])
	}
	for _, c := range p.chains {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	p.input = b.Bytes()
	return p
}

// jumpTarget returns the chain a saved rule spec jumps or goes to, or "".
func jumpTarget(spec string) string {
	fields := splitQuoted(spec)
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == "-j" || fields[i] == "-g" || fields[i] == "--jump" || fields[i] == "--goto" {
			return fields[i+1]
		}
	}
	return ""
}

// splitQuoted splits a saved rule spec on spaces outside double quotes
// (iptables-save quotes comments), backslash escaping the next character.
func splitQuoted(s string) []string {
	var (
		out    []string
		cur    strings.Builder
		quoted bool
		field  bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			field = true
		case c == '"':
			quoted = !quoted
			field = true
		case c == ' ' && !quoted:
			if field {
				out = append(out, cur.String())
				cur.Reset()
				field = false
			}
		default:
			cur.WriteByte(c)
			field = true
		}
	}
	if field {
		out = append(out, cur.String())
	}
	return out
}

// kubeProxyIPSets destroys kube-proxy's ipsets.
func kubeProxyIPSets(ctx context.Context, tools Tools, r *Report) error {
	out, err := tools.Run(ctx, nil, "ipset", "list", "-n")
	if missing(err) {
		r.Skipped = append(r.Skipped, "ipsets: ipset is not installed")
		return nil
	}
	if err != nil {
		return fmt.Errorf("cleanup: ipset list: %w", err)
	}
	var errs []string
	for _, name := range planIPSets(out) {
		if _, err := tools.Run(ctx, nil, "ipset", "destroy", name); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		r.removed("ipset %s", name)
	}
	if len(errs) > 0 {
		return fmt.Errorf("cleanup: ipset destroy: %s", strings.Join(errs, "; "))
	}
	return nil
}

// planIPSets returns the sets of an `ipset list -n` output that
// kube-proxy made: those named KUBE-*.
func planIPSets(list []byte) []string {
	var out []string
	for _, name := range strings.Fields(string(list)) {
		if strings.HasPrefix(name, "KUBE-") {
			out = append(out, name)
		}
	}
	return out
}

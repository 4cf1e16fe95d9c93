package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/policystage"
	"github.com/switchyard-lb/switchyard/core/reconcile"
	"github.com/switchyard-lb/switchyard/ipvs/dryrun"
	"github.com/switchyard-lb/switchyard/plugins/registry"
)

// DefaultAddress is the daemon's default metrics address, which serves
// /debug/state.
const DefaultAddress = "127.0.0.1:10249"

const stateTimeout = 10 * time.Second

var stateCommand = &command{
	name:  "state",
	short: "show a running daemon's desired and applied state",
	long: "Reads /debug/state from a switchyard daemon's metrics address and prints its plan:\n" +
		"every Service's virtual services and real servers, what is not applied yet,\n" +
		"what each announcer announces, and each Service's policy: the version it runs (the\n" +
		"module's sha256, short, and the resourceVersion of the ConfigMap it was loaded from),\n" +
		"whether it works, and if not, the error (a module that failed to load leaves the last\n" +
		"good version running). -o json prints the daemon's JSON as is.",
	setup: func(fs *flag.FlagSet) func(context.Context, ioStreams, []string) error {
		output := outputFlag(fs)
		address := fs.String("address", DefaultAddress, "the daemon's metrics address, host:port or an http(s) URL")
		ipvs := fs.Bool("ipvs", false, "print the applied virtual services as `ipvsadm -Ln` lists them")
		return func(ctx context.Context, s ioStreams, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			if *ipvs && *output == "json" {
				return usageError{"--ipvs and -o json exclude each other"}
			}
			if err := noArgs(args); err != nil {
				return err
			}
			body, err := fetchState(ctx, *address)
			if err != nil {
				return err
			}
			if *output == "json" {
				_, err := s.out.Write(body)
				return err
			}
			var st reconcile.State
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("decode state from %s: %w", *address, err)
			}
			if *ipvs {
				table, err := ipvsTable(st.Applied)
				if err != nil {
					return fmt.Errorf("state from %s: %w", *address, err)
				}
				_, err = io.WriteString(s.out, dryrun.Format(table))
				return err
			}
			return printState(s.out, &st)
		}
	},
}

// stateURL turns --address into the /debug/state URL.
func stateURL(address string) string {
	base := strings.TrimSuffix(address, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	return base + "/debug/state"
}

func fetchState(ctx context.Context, address string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	url := stateURL(address)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bad --address %q: %w", address, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w (is the daemon running, and --address its metrics address?)", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// printState writes st for people: a header, one line per virtual
// service, and what differs from what is applied.
func printState(w io.Writer, st *reconcile.State) error {
	fmt.Fprintf(w, "Node:       %s\n", st.Node)
	synced := "no"
	if st.Synced {
		synced = "yes"
	}
	fmt.Fprintf(w, "Synced:     %s\n", synced)
	if !st.LastSync.IsZero() {
		fmt.Fprintf(w, "Last sync:  %s\n", st.LastSync.UTC().Format(time.RFC3339))
	}
	if st.LastError != "" {
		fmt.Fprintf(w, "Last error: %s\n", st.LastError)
	}

	applied := make(map[string]reconcile.ServiceState, len(st.Applied))
	for _, s := range st.Applied {
		applied[s.Service] = s
	}
	var pending []string
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tKIND\tPROTO\tADDRESS\tSCHEDULER\tDESTINATIONS\tAPPLIED")
	for _, s := range st.Desired {
		a, ok := applied[s.Service]
		isApplied := ok && reflect.DeepEqual(a, s)
		if !isApplied {
			pending = append(pending, s.Service)
		}
		mark := yesNo(isApplied)
		if s.Rejected != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\trejected: %s\t%s\n", s.Service, s.Rejected, mark)
			continue
		}
		for _, vs := range s.VirtualServices {
			sched := vs.Scheduler
			if len(vs.Flags) > 0 {
				sched += "(" + strings.Join(vs.Flags, ",") + ")"
			}
			kind := vs.Kind
			if vs.Local {
				kind += "/Local"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Service, kind, vs.Protocol, vs.Address, sched, destinations(vs.Destinations), mark)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	desired := make(map[string]bool, len(st.Desired))
	for _, s := range st.Desired {
		desired[s.Service] = true
	}
	for _, s := range st.Applied {
		if !desired[s.Service] {
			pending = append(pending, s.Service+" (to remove)")
		}
	}
	if len(pending) > 0 {
		fmt.Fprintf(w, "\nNot applied yet: %s\n", strings.Join(pending, ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(st.Announced)) {
		set := st.Announced[name]
		addrs := make([]string, len(set))
		for i, a := range set {
			addrs[i] = a.Address.String() + " (" + a.Service + ")"
		}
		fmt.Fprintf(w, "\nAnnounced by %s: %s\n", name, strings.Join(addrs, ", "))
	}
	return printPolicies(w, st.Policies)
}

// printPolicies lists the Services' policies: the version each runs
// (the module's sha256, short, and the ConfigMap's resourceVersion it
// was loaded from; "-" for a built-in) and, for failing ones, why.
func printPolicies(w io.Writer, policies []policystage.Status) error {
	if len(policies) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPOLICY\tSHA256\tREVISION\tREADY\tREASON\tERROR")
	for _, p := range policies {
		msg := ""
		if !p.Ready {
			msg = p.Message
		}
		digest, rev := "-", "-"
		if p.Digest != "" {
			digest = registry.ShortDigest(p.Digest)
		}
		if p.Revision != "" {
			rev = p.Revision
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Service, p.Policy, digest, rev, yesNo(p.Ready), p.Reason, msg)
	}
	return tw.Flush()
}

// ipvsTable turns the applied plans back into virtual services, sorted
// by address, port and protocol.
func ipvsTable(applied []reconcile.ServiceState) ([]model.VirtualService, error) {
	var out []model.VirtualService
	for _, s := range applied {
		for _, v := range s.VirtualServices {
			proto, err := model.ParseProtocol(v.Protocol)
			if err != nil {
				return nil, fmt.Errorf("service %s: %w", s.Service, err)
			}
			vs := model.VirtualService{
				VirtualServiceKey: model.VirtualServiceKey{Addr: v.Address.Addr(), Port: v.Address.Port(), Protocol: proto},
				Scheduler:         v.Scheduler,
				Flags:             v.Flags,
				AffinityTimeout:   time.Duration(v.AffinitySeconds) * time.Second,
			}
			for _, d := range v.Destinations {
				vs.Destinations = append(vs.Destinations, model.Destination{Addr: d.Address.Addr(), Port: d.Address.Port(), Weight: d.Weight})
			}
			out = append(out, vs)
		}
	}
	slices.SortFunc(out, func(a, b model.VirtualService) int { return a.VirtualServiceKey.Compare(b.VirtualServiceKey) })
	return out, nil
}

func destinations(ds []reconcile.DestinationState) string {
	if len(ds) == 0 {
		return "none: rejected"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s w%d", d.Address, d.Weight)
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

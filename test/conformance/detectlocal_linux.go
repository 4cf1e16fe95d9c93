package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/switchyard-lb/switchyard/test/node"
)

// DetectLocalResult is what RunDetectLocal saw.
type DetectLocalResult struct {
	// Live is true when the Node had no pod CIDR at the start and got
	// one while the daemon ran; false on a node that had one already
	// (a pod CIDR cannot be changed or removed once set).
	Live bool `json:"live"`
	// Rule is the table's line with the node's pod CIDR; PickedUp how
	// long after the patch it appeared (Live only).
	Rule     string `json:"rule"`
	PickedUp string `json:"pickedUp,omitempty"`
	// Pod is the daemon's pod, the same before and after.
	Pod string `json:"pod"`
}

// RunDetectLocal proves detect-local's default (NodeCIDR, from the
// Node's spec.podCIDRs, followed without a restart) on the node: with
// Switchyard serving (every proxy in stop stopped first) and the Node
// without a pod CIDR, the daemon's nftables table must not name
// node.PodCIDR; once spec.podCIDRs is patched in, "ip saddr PODCIDR"
// must appear in it within wait, with the same daemon pod. On a Node
// that has its pod CIDR already the rule must be there (Live false).
// Switchyard stays deployed.
func RunDetectLocal(ctx context.Context, n *node.Node, sw Proxy, stop []Proxy, wait time.Duration, log *slog.Logger) (DetectLocalResult, error) {
	var res DetectLocalResult
	for _, p := range stop {
		if err := p.Stop(ctx, n); err != nil {
			return res, fmt.Errorf("conformance: stop %s: %w", p.Name(), err)
		}
	}
	if err := sw.Start(ctx, n); err != nil {
		return res, fmt.Errorf("conformance: start %s: %w", sw.Name(), err)
	}
	pod, err := daemonPod(ctx, n)
	if err != nil {
		return res, err
	}
	res.Pod = pod
	nodes := n.Client.CoreV1().Nodes()
	nd, err := nodes.Get(ctx, node.NodeName, metav1.GetOptions{})
	if err != nil {
		return res, fmt.Errorf("conformance: %w", err)
	}
	want := "ip saddr " + node.PodCIDR
	findRule := func() (string, error) {
		out, err := n.Exec(ctx, "nft list table inet switchyard")
		if err != nil {
			return "", fmt.Errorf("conformance: nft list table inet switchyard: %w", err)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, want+" ") {
				return strings.TrimSpace(l), nil
			}
		}
		return "", nil
	}
	var patched time.Time
	switch cidrs := nd.Spec.PodCIDRs; {
	case len(cidrs) == 0:
		res.Live = true
		var rule string
		// The table is there once the daemon's first sync ended.
		wctx, cancel := context.WithTimeout(ctx, wait)
		err := poll(wctx, "the table inet switchyard", func() (err error) {
			rule, err = findRule()
			return err
		})
		cancel()
		if err != nil {
			return res, err
		}
		if rule != "" {
			return res, fmt.Errorf("conformance: the table has %q before the Node has a pod CIDR", rule)
		}
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, node.PodCIDR, node.PodCIDR)
		if _, err := nodes.Patch(ctx, node.NodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return res, fmt.Errorf("conformance: patch the Node's pod CIDR: %w", err)
		}
		patched = time.Now()
		log.Info("Node patched", "podCIDRs", node.PodCIDR)
	case len(cidrs) != 1 || cidrs[0] != node.PodCIDR:
		return res, fmt.Errorf("conformance: the Node's pod CIDRs are %v, want [%s]", cidrs, node.PodCIDR)
	default:
		log.Info("the Node has its pod CIDR already: checking the rule only", "podCIDRs", cidrs)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := poll(wctx, fmt.Sprintf("%q in the table", want), func() error {
		rule, err := findRule()
		if err == nil && rule == "" {
			err = fmt.Errorf("not there")
		}
		res.Rule = rule
		return err
	}); err != nil {
		return res, err
	}
	if res.Live {
		res.PickedUp = since(patched)
	}
	after, err := daemonPod(ctx, n)
	if err != nil {
		return res, err
	}
	if after != pod {
		return res, fmt.Errorf("conformance: the daemon's pod changed from %s to %s: not followed live", pod, after)
	}
	return res, nil
}

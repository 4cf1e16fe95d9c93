package node

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

//go:embed coredns.yaml
var corednsManifest string

// dnsManifest is coredns.yaml with the node's addresses and image.
func dnsManifest() string {
	return strings.NewReplacer(
		"IMAGE", CoreDNSImage,
		"API_HOST", HostIP,
		"API_PORT", strconv.Itoa(APIPort),
		"CLUSTER_DNS_IP", ClusterDNSIP,
	).Replace(corednsManifest)
}

// ApplyDNS applies the DNS add-on (kubectl apply, so a reused node gets
// it unchanged). It does not wait for CoreDNS to be Ready.
func (n *Node) ApplyDNS(ctx context.Context) error {
	cmd := n.Kubectl(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(dnsManifest())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("node: apply the DNS add-on: %w: %s", err, out)
	}
	return nil
}

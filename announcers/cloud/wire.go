package cloud

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/switchyard-lb/switchyard/core/model"
)

// Node is a node the provider sends traffic to.
type Node struct {
	Name  string
	Addrs []netip.Addr
}

// ensureBody is the JSON body of PUT /v1/addresses/{address}.
type ensureBody struct {
	Address  string     `json:"address"`
	Owner    string     `json:"owner"`
	Services []string   `json:"services"`
	Nodes    []wireNode `json:"nodes"`
}

type wireNode struct {
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
	Weight    int      `json:"weight"`
}

// errorBody is the optional JSON body of an error response.
type errorBody struct {
	Error string `json:"error"`
}

// encodeEnsure returns the canonical body for addr, each node with its
// weight: sorted, so that equal desired states give equal bytes.
func encodeEnsure(addr netip.Addr, owner string, services []model.ServiceKey, nodes []Node, weight func(node string) int) []byte {
	b := ensureBody{Address: addr.String(), Owner: owner, Services: []string{}, Nodes: []wireNode{}}
	for _, s := range services {
		b.Services = append(b.Services, s.String())
	}
	slices.Sort(b.Services)
	b.Services = slices.Compact(b.Services)
	for _, n := range nodes {
		w := wireNode{Name: n.Name, Addresses: []string{}, Weight: weight(n.Name)}
		for _, a := range n.Addrs {
			w.Addresses = append(w.Addresses, a.String())
		}
		slices.Sort(w.Addresses)
		w.Addresses = slices.Compact(w.Addresses)
		b.Nodes = append(b.Nodes, w)
	}
	slices.SortFunc(b.Nodes, func(x, y wireNode) int { return strings.Compare(x.Name, y.Name) })
	out, err := json.Marshal(b)
	if err != nil {
		panic("cloud: marshal ensure body: " + err.Error()) // plain strings: cannot fail
	}
	return out
}

// addressPath is the path of addr below the base URL.
func addressPath(addr netip.Addr) string {
	return "/v1/addresses/" + url.PathEscape(addr.String())
}

// idempotencyKey digests a request.
func idempotencyKey(method, path string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method + " " + path + "\n"))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/switchyard-lb/switchyard/core/model"
	"github.com/switchyard-lb/switchyard/core/plugin"
)

// DefaultNow is the evaluation time of a scenario without `now`.
var DefaultNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Scenario is one scenario file: a Service port, the node, the endpoints
// with their live statistics and, optionally, the expected decision.
type Scenario struct {
	// Name is what messages call the scenario: its file's path.
	Name string `yaml:"-"`

	Service   Service    `yaml:"service"`
	Node      Node       `yaml:"node"`
	Now       time.Time  `yaml:"now"`
	Endpoints []Endpoint `yaml:"endpoints"`
	Expect    *Expect    `yaml:"expect"`
}

// Service is the Service port being decided for.
type Service struct {
	Namespace string `yaml:"namespace"`
	Name      string `yaml:"name"`
	Type      string `yaml:"type"` // ClusterIP (default), NodePort or LoadBalancer
	Port      struct {
		Name     string `yaml:"name"`
		Protocol string `yaml:"protocol"`
		Port     uint16 `yaml:"port"`
	} `yaml:"port"`
	// Params are the policy's parameters, written as a YAML or JSON object
	// or as a string holding JSON.
	Params Params `yaml:"params"`
}

// Node is the node the daemon runs on.
type Node struct {
	Name string `yaml:"name"`
	Zone string `yaml:"zone"`
}

// Endpoint is one endpoint of the Service port.
type Endpoint struct {
	Address     string        `yaml:"address"`
	Port        uint16        `yaml:"port"`
	Node        string        `yaml:"node"`
	Zone        string        `yaml:"zone"`
	Ready       *bool         `yaml:"ready"`   // default true
	Serving     *bool         `yaml:"serving"` // default: ready
	Terminating bool          `yaml:"terminating"`
	HintZones   []string      `yaml:"hintZones"`
	Age         time.Duration `yaml:"age"`
	Stats       Stats         `yaml:"stats"`

	addr netip.Addr
}

// Stats are an endpoint's IPVS statistics.
type Stats struct {
	ActiveConns   uint32 `yaml:"activeConns"`
	InactiveConns uint32 `yaml:"inactiveConns"`
	ConnRate      uint32 `yaml:"connRate"`
	BytesInRate   uint64 `yaml:"bytesInRate"`
	BytesOutRate  uint64 `yaml:"bytesOutRate"`
}

// Params holds a policy's parameters as JSON.
type Params []byte

// UnmarshalYAML accepts an object (YAML or JSON flow style) or a string
// holding JSON.
func (p *Params) UnmarshalYAML(decode func(any) error) error {
	var v any
	if err := decode(&v); err != nil {
		return err
	}
	switch v := v.(type) {
	case nil:
		*p = nil
	case string:
		if !json.Valid([]byte(v)) {
			return errors.New("service.params is not valid JSON")
		}
		*p = Params(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("service.params: %w", err)
		}
		*p = b
	}
	return nil
}

// Load reads and parses a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	return Parse(path, b)
}

// Parse parses a scenario named name from src.
func Parse(name string, src []byte) (*Scenario, error) {
	sc := &Scenario{}
	if err := yaml.UnmarshalWithOptions(src, sc, yaml.Strict()); err != nil {
		return nil, yamlError(name, src, err)
	}
	sc.Name = name
	if err := sc.check(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", name, err)
	}
	return sc, nil
}

// Default is the small scenario `yardctl policy validate` runs when given
// none: two endpoints, one on this node and zone, no parameters.
func Default() *Scenario {
	sc := &Scenario{Name: "(built-in sample)"}
	sc.Service.Namespace, sc.Service.Name = "default", "sample"
	sc.Service.Port.Port = 80
	sc.Node.Name, sc.Node.Zone = "node-a", "zone-a"
	sc.Endpoints = []Endpoint{
		{Address: "10.0.0.1", Port: 8080, Node: "node-a", Zone: "zone-a"},
		{Address: "10.0.1.1", Port: 8080, Node: "node-b", Zone: "zone-b"},
	}
	_ = sc.check()
	return sc
}

// Synthetic is a scenario of n endpoints spread over 20 nodes and two
// zones, with growing ages and active connections, for benchmarks.
func Synthetic(n int) *Scenario {
	sc := Default()
	sc.Name = fmt.Sprintf("(%d synthetic endpoints)", n)
	sc.Endpoints = nil
	for i := range n {
		zone := "zone-a"
		if i%3 != 0 {
			zone = "zone-b"
		}
		e := Endpoint{
			addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Port: 8080,
			Node: fmt.Sprintf("node-%d", i%20), Zone: zone, Age: time.Duration(i) * time.Second,
		}
		e.Address = e.addr.String()
		e.Stats.ActiveConns = uint32(i % 100)
		sc.Endpoints = append(sc.Endpoints, e)
	}
	return sc
}

func (sc *Scenario) check() error {
	if _, err := model.ParseProtocol(sc.Service.Port.Protocol); err != nil {
		return fmt.Errorf("service.port.protocol: %w", err)
	}
	switch sc.Service.Type {
	case "", "ClusterIP", "NodePort", "LoadBalancer":
	default:
		return fmt.Errorf("service.type %q: want ClusterIP, NodePort or LoadBalancer", sc.Service.Type)
	}
	for i := range sc.Endpoints {
		e := &sc.Endpoints[i]
		a, err := netip.ParseAddr(e.Address)
		if err != nil {
			return fmt.Errorf("endpoints[%d].address %q is not an IPv4 or IPv6 address", i, e.Address)
		}
		e.addr = a
	}
	if sc.Now.IsZero() {
		sc.Now = DefaultNow
	}
	if sc.Expect != nil {
		if err := sc.Expect.check(len(sc.Endpoints)); err != nil {
			return fmt.Errorf("expect: %w", err)
		}
	}
	return nil
}

// Input is the policy input the daemon would build for the scenario.
func (sc *Scenario) Input() *plugin.PolicyInput {
	proto, _ := model.ParseProtocol(sc.Service.Port.Protocol)
	typ := model.ClusterIP
	switch sc.Service.Type {
	case "NodePort":
		typ = model.NodePort
	case "LoadBalancer":
		typ = model.LoadBalancer
	}
	port := model.ServicePort{Name: sc.Service.Port.Name, Protocol: proto, Port: sc.Service.Port.Port}
	node := &model.Node{Name: sc.Node.Name, Zone: sc.Node.Zone, Ready: true}
	in := &plugin.PolicyInput{
		Service: &model.Service{Key: model.ServiceKey{Namespace: sc.Service.Namespace, Name: sc.Service.Name}, Type: typ,
			Ports: []model.ServicePort{port}, PolicyParams: string(sc.Service.Params)},
		Port: port, Node: node, Now: sc.Now, Params: []byte(sc.Service.Params),
	}
	for _, e := range sc.Endpoints {
		ready := e.Ready == nil || *e.Ready
		serving := ready
		if e.Serving != nil {
			serving = *e.Serving
		}
		in.Endpoints = append(in.Endpoints, plugin.PolicyEndpoint{
			Endpoint: model.Endpoint{Addr: e.addr, Port: e.Port, PortName: port.Name, Protocol: proto,
				NodeName: e.Node, Zone: e.Zone, Ready: ready, Serving: serving, Terminating: e.Terminating, HintZones: e.HintZones},
			Local:     e.Node != "" && e.Node == node.Name,
			SameZone:  e.Zone != "" && e.Zone == node.Zone,
			FirstSeen: sc.Now.Add(-e.Age),
			Stats: plugin.EndpointStats{ActiveConns: e.Stats.ActiveConns, InactiveConns: e.Stats.InactiveConns,
				ConnRate: e.Stats.ConnRate, BytesInRate: e.Stats.BytesInRate, BytesOutRate: e.Stats.BytesOutRate},
		})
	}
	return in
}

// Addr is the endpoint's address and port.
func (e *Endpoint) Addr() netip.AddrPort { return netip.AddrPortFrom(e.addr, e.Port) }

// CheckParams checks parameters given as JSON (a --params file).
func CheckParams(b []byte) error {
	if !json.Valid(b) {
		return errors.New("not valid JSON")
	}
	return nil
}

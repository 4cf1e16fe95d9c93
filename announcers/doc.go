// Package announcers is the home of Switchyard's announcers: the
// plugin.Announcer implementations that make LoadBalancer addresses
// reachable from outside the cluster once the election has given them to
// this node. Each lives in its own subpackage and owns only its own
// sockets and sessions:
//
//   - arp: layer 2, answering ARP and IPv6 neighbour discovery on the
//     local segment and announcing ownership changes gratuitously;
//   - bgp: an embedded BGP speaker advertising host routes to routers;
//   - cloud: a cloud load balancer driven through an HTTP webhook.
//
// report wraps any of them to turn failures of one address into
// AnnounceFailed Events on the address's Services.
//
// None of them reads the config or Kubernetes: core/lb builds them from
// the config, one registered type each, and calls each from one goroutine.
//
// This package itself holds no code.
package announcers

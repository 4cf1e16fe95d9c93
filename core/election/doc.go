// Package election owns the pure decision of which nodes announce a
// LoadBalancer address: with layer 2 (ARP/NDP) exactly one owner per
// address, with BGP every eligible node (ECMP).
//
// Every daemon evaluates the same functions over the same inputs and so
// reaches the same answer without talking to the others. The layer-2
// owner of an address is the eligible node with the lowest
// sha256(node + "#" + address) (rendezvous hashing): an address moves only
// when its owner stops being eligible, or when a newly eligible node ranks
// first for it, and addresses spread evenly over nodes.
//
// The package does no I/O: gossip membership reaches it as an AliveFunc,
// Kubernetes node readiness and endpoints as Candidate fields.
package election

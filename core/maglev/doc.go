// Package maglev builds Maglev consistent-hashing lookup tables (Eisenbud
// et al., "Maglev: A Fast and Reliable Software Network Load Balancer",
// NSDI '16, section 3.4), with weights.
//
// It is for the ECMP-resilient LoadBalancer mode (issue 12): every node
// the router may send a flow to must pick the same backend node for it
// without talking to the others. Each node builds, per Service, a table
// over the nodes holding ready endpoints; a flow's hash indexes the table
// and names the node to send it to. Since New sorts its input by name and
// hashes names with a seed given by the caller, nodes given the same set
// of backends, the same size and the same cluster-wide seed build the
// same table, byte for byte, whatever order they learnt the backends in.
//
// When a backend leaves, its slots go to the others and a small fraction
// of the other slots move between them; a backend joining takes its
// share, and again a small fraction moves between the others (the
// package tests measure both: under 2% of the slots from 100 backends
// on, which at 1,000 backends is several times the newcomer's share). The table size must not change
// when backends do: a different size moves almost every slot. Choose it
// once, cluster-wide, a prime at least 100 times the most backends a
// table will hold (SizeFor), which keeps every backend's share within a
// few percent of its due.
//
// The package is pure (no I/O, no state beyond the Table) and not wired
// into the dataplane yet.
package maglev

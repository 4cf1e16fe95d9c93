// Package reconcile owns the control loop's one sync: it takes what changed
// from the watch (Source), replans it (plan.Planner) and drives the
// plugins, in an order that never attracts traffic the node cannot serve:
//
//  1. nothing happens until the Source has synced every cache and the
//     policy stage's policies have loaded, so the loop never acts (above
//     all never deletes) on partial data; with Config.EarlyApply, an
//     AddOnlyDataplane is given what has arrived meanwhile to add,
//     removing nothing and announcing nothing, but for the Services whose
//     policy is still loading, and the first sync after everything
//     synced is the full one that prunes;
//  2. announcers withdraw addresses that are going away, before the
//     dataplane removes their virtual services;
//  3. the dataplane applies the changed Services (everything on the first
//     sync, on a periodic full resync (Config.FullSyncPeriod), and
//     after any failure, so that a retry repairs whatever a failed Apply
//     left); changes that a periodic resync finds pending are applied on
//     their own first, so that they do not wait for it, and a resync is
//     followed by nine times its own duration before the next, so that
//     changes arriving during one (which wait for it) are rare however
//     slow it is;
//  4. only then do announcers announce new addresses and the health check
//     servers report new counts.
//
// With Config.PolicyStage.Policies set, the policy stage
// (core/policystage) sits between the planner and the plugins: every Sync
// hands it what the watch changed and the planner's plan (Weigh), and
// hands the dataplane its weighted plan and only the Services whose
// weighted plan changed; the dataplane's live statistics reach it when the
// dataplane is a plugin.StatsReader, the schedulers a policy may name are
// the dataplane's when it is a plugin.SchedulerSet, and State shows what
// it says of each
// Service's policy. The loop waits for the policies to sync before its
// first Sync. The planner stays pure, and a policy's failure never fails
// the sync.
//
// Announcers (Config.Elected, plugin.ElectedAnnouncer) announce only
// what this node wins (elect.go): per address of the plan that the announcer serves (its
// pools), core/election decides among the nodes the Source reports, with
// the announcer's node selector, a ready local endpoint when the
// Service's externalTrafficPolicy is Local (taken from the Delta's
// endpoints), and gossip membership (Config.Alive) ahead of Kubernetes
// readiness. Layer 2 (ARP, cloud) elects one node per address, BGP every
// eligible node. Ownership moves need no replanning: a Sync elects again
// the addresses of the Services it took a change of, and every address
// when the nodes' readiness or labels, gossip's answers (asked once per
// node and Sync), the options or an announcer's Version (its pools or
// node selector reloaded) changed, and on a full resync; so a node
// change or a membership change (the daemon triggers the runner on it)
// moves the address, still withdrawing before the dataplane removes and
// announcing after it serves. The rest of each announcer's election is
// kept from the last Sync (announce.go), so that one endpoint change
// costs the same with 10 or 10,000 LoadBalancer Services; only a change
// of what an announcer announces copies its whole set, as Announce is
// declarative.
//
// With Config.DSR, the dsr stage (dsr.go) turns the plan's dsr frontends
// and the nodes into this node's model.DSRPlan (Maglev tables, peers and
// their marks) and applies it around the dataplane: tables in which this
// node loses slots before it, the rest after it. A DSRMarksReader gives
// a restarted daemon the peer marks the kernel holds, so that its first
// apply rebuilds no peer's service. State shows the applied side
// (DSRState: tables by slots per node, peers, marks, this node's role per
// address).
//
// Errors of every plugin are joined and returned, so the runner retries.
// The handlers of the watch only record changes; this loop is the one
// place that acts on them. The daemon wires it as
//
//	r := runner.New("sync", func(ctx context.Context) error {
//		_, err := loop.Sync(ctx)
//		return err
//	}, minSyncPeriod, syncPeriod, retryPeriod)
//	source := k8s.New(client, k8s.Options{NodeName: node, OnChange: r.Trigger}, log)
//
// and triggers r once the Source has synced, so the first full sync does
// not wait for the periodic run.
package reconcile

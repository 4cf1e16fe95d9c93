package lb

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-lb/switchyard/core/config"
	"github.com/switchyard-lb/switchyard/core/ipam"
	"github.com/switchyard-lb/switchyard/core/metrics"
)

// ipamPools converts the config's pools.
func ipamPools(pools []config.Pool) []ipam.Pool {
	out := make([]ipam.Pool, 0, len(pools))
	for _, p := range pools {
		out = append(out, ipam.Pool{
			Name:               p.Name,
			Addresses:          slices.Clone(p.Addresses),
			AutoAssign:         p.AutoAssign == nil || *p.AutoAssign,
			AvoidBuggyIPs:      p.AvoidBuggyIPs,
			Namespaces:         slices.Clone(p.Namespaces),
			NamespaceSelectors: ipamSelectors(p.NamespaceSelectors),
			ServiceSelectors:   ipamSelectors(p.ServiceSelectors),
		})
	}
	return out
}

func ipamSelectors(ss []config.LabelSelector) []ipam.Selector {
	var out []ipam.Selector
	for _, s := range ss {
		sel := ipam.Selector{MatchLabels: s.MatchLabels}
		for _, r := range s.MatchExpressions {
			sel.MatchExpressions = append(sel.MatchExpressions,
				ipam.Requirement{Key: r.Key, Operator: ipam.Operator(r.Operator), Values: r.Values})
		}
		out = append(out, sel)
	}
	return out
}

// poolCollector reports the allocator's pools while it leads.
type poolCollector struct{ stats func() []ipam.PoolStats }

var (
	poolTotalDesc = prometheus.NewDesc(metrics.Namespace+"_pool_addresses_total",
		"Addresses a pool may hand out; reported by the allocating daemon only.", []string{"pool"}, nil)
	poolUsedDesc = prometheus.NewDesc(metrics.Namespace+"_pool_addresses_used",
		"Addresses of a pool held by Services; reported by the allocating daemon only.", []string{"pool"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolTotalDesc; ch <- poolUsedDesc }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.stats() {
		ch <- prometheus.MustNewConstMetric(poolTotalDesc, prometheus.GaugeValue, float64(s.Total), s.Pool)
		ch <- prometheus.MustNewConstMetric(poolUsedDesc, prometheus.GaugeValue, float64(s.Used), s.Pool)
	}
}

# labsummary.awk turns the output of BenchmarkLabDataplane (ipvs/labtest,
# run by `make bench-lab`) into a table: our Dataplane against the floor, a
# plain cloudflare/ipvs loop creating the same objects in the same boot.

function ms(s) {
	if (s >= 1) return sprintf("%.2f s", s)
	return sprintf("%.2f ms", s * 1000)
}

/^BenchmarkLabDataplane/ {
	for (i = 2; i < NF; i++) m[$(i + 1)] = $i
	found = 1
}

END {
	if (!found) {
		print "labsummary: no BenchmarkLabDataplane result in the output" > "/dev/stderr"
		exit 1
	}
	printf "\nIPVS in the lab (one guest, TCG): %d Services x 10 endpoints\n", m["services"]
	printf "%-34s %12s %12s %8s\n", "", "switchyard", "floor", "ratio"
	printf "%-34s %12s %12s %7.2fx\n", "program from scratch", ms(m["scratch-s"]), ms(m["floor-s"]), m["scratch/floor"]
	printf "%-34s %12s %12s %7.1fx\n", "one endpoint change (weight)", ms(m["change-ms"] / 1000), ms(m["floor-change-ms"] / 1000), m["change/floor"]
	printf "%-34s %12s %12s %8s\n", "restart: a new Dataplane's resync", ms(m["restart-resync-s"]), "-", "-"
	if ("resync-s" in m) {
		printf "%-34s %12s %12s %8s\n", "periodic full resync, no change", ms(m["resync-s"]), "-", "-"
		printf "  its kernel reads: the service dump %s, /proc/net/ip_vs in one pass %s,\n", ms(m["dump-services-s"]), ms(m["read-table-s"])
		printf "  against one real-server dump per virtual service %s\n", ms(m["dump-dests-s"])
	}
}

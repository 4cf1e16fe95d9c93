# benchsummary.awk turns `go test -bench -benchmem` output into one table:
# package, benchmark, time per operation in a readable unit, bytes and
# allocations per operation. bench.mk's bench-host target runs it.

function human(ns) {
	if (ns >= 1e9) return sprintf("%.2f s", ns / 1e9)
	if (ns >= 1e6) return sprintf("%.2f ms", ns / 1e6)
	if (ns >= 1e3) return sprintf("%.2f µs", ns / 1e3)
	return sprintf("%.0f ns", ns)
}

function bytes(b) {
	if (b >= 1048576) return sprintf("%.1f MiB", b / 1048576)
	if (b >= 1024) return sprintf("%.1f KiB", b / 1024)
	return sprintf("%d B", b)
}

/^pkg: / { pkg = $2; sub(/^github.com\/switchyard-lb\/switchyard\//, "", pkg) }

/^Benchmark/ && / ns\/op/ {
	name = $1
	sub(/-[0-9]+$/, "", name) # the GOMAXPROCS suffix
	sub(/^Benchmark/, "", name)
	ns = ""; b = ""; allocs = ""
	for (i = 2; i < NF; i++) {
		if ($(i + 1) == "ns/op") ns = $i
		if ($(i + 1) == "B/op") b = $i
		if ($(i + 1) == "allocs/op") allocs = $i
	}
	rows[++n] = sprintf("%-16s %-48s %12s %12s %12s", pkg, name, human(ns), b == "" ? "-" : bytes(b), allocs == "" ? "-" : allocs)
}

END {
	printf "%-16s %-48s %12s %12s %12s\n", "package", "benchmark", "time/op", "bytes/op", "allocs/op"
	for (i = 1; i <= n; i++) print rows[i]
	if (n == 0) { print "no benchmark results"; exit 1 }
}

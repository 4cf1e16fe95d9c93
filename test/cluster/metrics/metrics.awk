# metrics.awk summarizes the cluster lab's measurements: every
# "cluster-metric NAME=VALUE" line a suite logged (test/cluster), as the
# count, median and max of each NAME, in the order first seen. A
# "cluster-bound NAME=VALUE" line (a claim with its margin) bounds NAME's
# median: over it, the summary says so and exits 1.
{
	if (match($0, /cluster-metric [a-z0-9-]+=-?[0-9]+/)) {
		kv = substr($0, RSTART + 15, RLENGTH - 15)
		split(kv, p, "=")
		if (!(p[1] in n)) order[++names] = p[1]
		v[p[1], ++n[p[1]]] = p[2] + 0
	} else if (match($0, /cluster-bound [a-z0-9-]+=[0-9]+/)) {
		kv = substr($0, RSTART + 14, RLENGTH - 14)
		split(kv, p, "=")
		# the tightest, should runs disagree
		if (!(p[1] in bound) || p[2] + 0 < bound[p[1]]) bound[p[1]] = p[2] + 0
	}
}
END {
	if (names == 0) {
		print "  no cluster-metric lines"
		exit 1
	}
	printf "  %-28s %5s %10s %10s %10s  %s\n", "metric", "runs", "median", "max", "bound", "values"
	over = 0
	for (i = 1; i <= names; i++) {
		k = order[i]; c = n[k]
		for (j = 1; j <= c; j++) s[j] = v[k, j]
		# insertion sort: a handful of runs
		for (j = 2; j <= c; j++) {
			x = s[j]
			for (m = j - 1; m >= 1 && s[m] > x; m--) s[m + 1] = s[m]
			s[m + 1] = x
		}
		med = (c % 2) ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
		vals = ""
		for (j = 1; j <= c; j++) vals = vals (j > 1 ? " " : "") v[k, j]
		b = (k in bound) ? bound[k] : "-"
		printf "  %-28s %5d %10g %10g %10s  %s\n", k, c, med, s[c], b, vals
		if ((k in bound) && med > bound[k]) {
			msg[++over] = sprintf("  %s: median %g over its bound %g (the claim with its margin)", k, med, bound[k])
		}
	}
	for (i = 1; i <= over; i++) print msg[i]
	if (over > 0) exit 1
}

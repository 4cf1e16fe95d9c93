# metrics.awk summarizes the cluster lab's measurements: every
# "cluster-metric NAME=VALUE" line a suite logged (test/cluster), as the
# count, median and max of each NAME, in the order first seen.
{
	if (match($0, /cluster-metric [a-z0-9-]+=-?[0-9]+/)) {
		kv = substr($0, RSTART + 15, RLENGTH - 15)
		split(kv, p, "=")
		if (!(p[1] in n)) order[++names] = p[1]
		v[p[1], ++n[p[1]]] = p[2] + 0
	}
}
END {
	if (names == 0) {
		print "  no cluster-metric lines"
		exit 1
	}
	printf "  %-28s %5s %10s %10s  %s\n", "metric", "runs", "median", "max", "values"
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
		printf "  %-28s %5d %10g %10g  %s\n", k, c, med, s[c], vals
	}
}

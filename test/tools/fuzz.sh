#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target in the repository (each `func FuzzX`
# in a _test.go file that git tracks) for FUZZTIME each, one after the
# other, and fails if any finds a failing input. Go writes such an input
# to the package's testdata/fuzz/FuzzX/, where plain `go test` replays it
# from then on: commit it as the regression case with the fix.
#
# Environment: GO (default go), FUZZTIME (default 20s), FUZZ_PARALLEL
# (fuzzing workers, default 2), FUZZ_RUN (a regexp: only targets whose
# "package-dir.FuzzName" matches).
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
FUZZ_PARALLEL=${FUZZ_PARALLEL:-2}
FUZZ_RUN=${FUZZ_RUN:-.}
cd "$(git rev-parse --show-toplevel)"

targets=()
while IFS= read -r line; do
	file=${line%%:*}
	name=$(sed -E 's/^[^:]*:func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$line")
	targets+=("$(dirname "$file") $name")
done < <(git grep -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go' | sort)

if [ ${#targets[@]} -eq 0 ]; then
	echo "make fuzz: no fuzz targets found" >&2
	exit 1
fi

failed=()
ran=0
for t in "${targets[@]}"; do
	dir=${t% *}
	name=${t#* }
	grep -Eq -- "$FUZZ_RUN" <<<"$dir.$name" || continue
	# The target's module: the nearest go.mod above the package.
	mod=$dir
	while [ "$mod" != "." ] && [ ! -f "$mod/go.mod" ]; do mod=$(dirname "$mod"); done
	rel=./${dir#"$mod"}
	rel=${rel/#.\/\//./}
	echo "make fuzz: $dir $name for $FUZZTIME"
	if ! (cd "$mod" && $GO test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" -parallel "$FUZZ_PARALLEL" "$rel"); then
		failed+=("$dir $name")
		ls -t "$dir/testdata/fuzz/$name" 2>/dev/null | head -1 | sed "s|^|make fuzz: failing input written to $dir/testdata/fuzz/$name/|"
	fi
	ran=$((ran + 1))
done

echo "make fuzz: $ran targets run, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'make fuzz: FAILED %s\n' "${failed[@]}"
	exit 1
fi

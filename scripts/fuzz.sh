#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given budget each
# (go test -fuzztime: a count such as 30000x, or a duration).
# go test accepts one -fuzz target per run, so we list them first.
set -euo pipefail
fuzztime=${1:-30000x}
go=${GO:-go}
found=0
for pkg in $($go list ./...); do
	for target in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=1
		echo "fuzz: $pkg $target ($fuzztime)"
		$go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done
[ "$found" = 1 ] || echo "fuzz: no fuzz targets"

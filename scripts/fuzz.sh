#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given budget each
# (go test -fuzztime: a count such as 30000x, or a duration).
# go test accepts one -fuzz target per run, so we list them first.
# FuzzSchedules, which runs a whole randomized cluster per input (about
# 100 execs/s), takes its own budget, FUZZTIME_SCHEDULES, when it is set.
# FUZZMINIMIZETIME, when set, bounds the time the fuzzer spends
# minimizing each input that finds new coverage (go test's default is a
# minute, during which no input runs).
set -euo pipefail
fuzztime=${1:-30000x}
schedules=${FUZZTIME_SCHEDULES:-$fuzztime}
minimize=()
[ -n "${FUZZMINIMIZETIME:-}" ] && minimize=(-fuzzminimizetime "$FUZZMINIMIZETIME")
go=${GO:-go}
found=0
for pkg in $($go list ./...); do
	for target in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		found=1
		budget=$fuzztime
		[ "$target" = FuzzSchedules ] && budget=$schedules
		echo "fuzz: $pkg $target ($budget)"
		log=$(mktemp)
		began=$(date +%s)
		if ! $go test -run '^$' -fuzz "^${target}\$" -fuzztime "$budget" "${minimize[@]}" -timeout 24h "$pkg" 2>&1 | tee "$log"; then
			# On a loaded machine the fuzzer may take a worker that answers
			# late for a hung one. That is not a crash if the input it
			# saved passes when run again as a test; a real crash repeats.
			input=$(sed -n 's/^ *Failing input written to \(testdata\/fuzz\/[^ ]*\)$/\1/p' "$log" | head -1)
			if grep -q 'fuzzing process hung or terminated unexpectedly' "$log" && [ -n "$input" ] &&
				$go test -count 1 -run "^${target}\$/$(basename "$input")\$" "$pkg"; then
				dir=$($go list -f '{{.Dir}}' "$pkg")
				echo "fuzz: $target: the worker was reported hung, but its saved input passes; not a crash" >&2
				rm -f "$dir/$input"
				rmdir "$dir/$(dirname "$input")" 2>/dev/null || true
			else
				rm -f "$log"
				exit 1
			fi
		fi
		echo "fuzz: $target: $budget in $(($(date +%s) - began)) s"
		rm -f "$log"
	done
done
[ "$found" = 1 ] || echo "fuzz: no fuzz targets"

#!/usr/bin/env bash
# make demo: build examples/cluster, saying what it does while it does it
# (a cold first build fetches fero's modules and compiles them all, which
# takes minutes on a small machine), then run it.
set -euo pipefail
go=${GO:-go}
bin=${BIN:-.bin}
mkdir -p "$bin"
began=$(date +%s)
# progress runs "$@" and prints the time it has taken every 15 s until it ends.
progress() {
	local what=$1
	shift
	"$@" &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 1 15); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		kill -0 "$pid" 2>/dev/null && echo "demo: still $what ($(( $(date +%s) - began )) s so far)"
	done
	wait "$pid"
}
echo "demo: fetching fero's modules (nothing to do if they are cached)"
progress "fetching modules" $go mod download
echo "demo: building examples/cluster (a first build compiles fero and its dependencies: minutes on a 2-core machine; later builds take seconds)"
progress "building" $go build -o "$bin/cluster" ./examples/cluster
echo "demo: built in $(( $(date +%s) - began )) s; running the cluster"
exec "$bin/cluster"

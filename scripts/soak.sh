#!/usr/bin/env bash
# The hostile soak (issue 17): three fero servers with a cluster secret on
# loopback, a fixed-rate load at SOAK_FRACTION of the measured max for
# SOAK_DURATION, once alone and once with fero-hostile attacking server 0
# beside it. Every SOAK_SAMPLE seconds it records each server's RSS. It
# prints both latency reports, the RSS samples, and whether every server
# survived. Everything it starts it stops, by PID.
#
#   make soak                                  # 10 minutes each way
#   SOAK_DURATION=1m ./scripts/soak.sh         # a short try
set -euo pipefail
duration=${SOAK_DURATION:-10m}
fraction=${SOAK_FRACTION:-0.8}
sample=${SOAK_SAMPLE:-10}
go=${GO:-go}
out=${SOAK_OUT:-.soak/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$bin"
}
trap cleanup EXIT

$go build -o "$bin/fero-bench" ./cmd/fero-bench
$go build -o "$bin/fero-hostile" ./cmd/fero-hostile
$go build -o "$bin/fero" ./cmd/fero
"$bin/fero" secret > "$out/cluster.secret"
export FERO_BENCH_SECRET_FILE="$out/cluster.secret"

cd "$bin"
peers=""
for i in 0 1 2; do
	./fero-bench server --index $i ${peers:+--peers "$peers"} > "s$i" 2> "$out/server-$i.log" &
	pids+=($!)
	for _ in $(seq 1 300); do [ -s "s$i" ] && break; sleep 0.1; done
	[ -s "s$i" ] || { echo "soak: server $i did not start" >&2; exit 1; }
	peers="${peers:+$peers,}$(cat "s$i")"
done
servers=("${pids[@]}")
echo "soak: servers ${servers[*]} at $peers; out $out"

# RSS of every server, every $sample s, until the script ends.
(
	echo "seconds,server,rss_kb" > "$out/rss.csv"
	t0=$(date +%s)
	while :; do
		for i in 0 1 2; do
			rss=$(awk '/^VmRSS:/ {print $2}' "/proc/${servers[$i]}/status" 2>/dev/null || echo dead)
			echo "$(( $(date +%s) - t0 )),$i,$rss" >> "$out/rss.csv"
		done
		sleep "$sample"
	done
) &
pids+=($!)

# The max: request→reply throughput of the attached cluster (run --attach
# takes no --sweep, so measure it and take the fraction here).
./fero-bench run --systems fero --attach "$peers" -c 3 -s reqreply --runs 1 > "$out/max.txt" 2>&1
max=$(awk '/\* sacks:/ { gsub(",", "", $6); print $6; exit }' "$out/max.txt")
[ -n "$max" ] || { echo "soak: no max in $out/max.txt" >&2; exit 1; }
rate=$(awk -v m="$max" -v f="$fraction" 'BEGIN { printf "%d", m * f }')
echo "soak: max $max req/s; load at $fraction of it: $rate req/s"

load() {
	./fero-bench run --systems fero --attach "$peers" -c 3 -s rate --rate "$rate" \
		--duration "$duration" --runs 1 > "$out/$1.txt" 2>&1
}

echo "soak: run 1 of 2, the load alone ($duration)"
load alone
echo "soak: run 2 of 2, the load with fero-hostile beside it ($duration)"
read -r gossip data < s0
./fero-hostile --data "$data" --gossip "$gossip" --claim server-1 --duration "$duration" > "$out/fero-hostile.txt" 2>&1 &
hostile=$!
pids+=($hostile)
load hostile
wait "$hostile" || true

alive=0
for p in "${servers[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
echo "soak: servers alive at the end: $alive of 3"
for r in alone hostile; do
	echo "== $r"
	sed -n '/latency at a fixed rate/,$p' "$out/$r.txt" | grep -E '^fero|latency ' || true
done
echo "== RSS (kB): first, max, last per server"
awk -F, 'NR > 1 && $3 != "dead" { s = $2; if (!(s in first)) first[s] = $3; if ($3 > mx[s]) mx[s] = $3; last[s] = $3 }
	END { for (s in first) printf "server %s: %s, %s, %s\n", s, first[s], mx[s], last[s] }' "$out/rss.csv" | sort
echo "== fero-hostile"
tail -n 3 "$out/fero-hostile.txt"
[ "$alive" = 3 ]

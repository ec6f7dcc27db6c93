#!/usr/bin/env bash
# The hostile soak (issue 17): three fero servers with a cluster secret on
# loopback, a fixed-rate load at SOAK_FRACTION of the open-loop max for
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
trap 'exit 1' INT TERM

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

# The max load is what the open loop sustains, not the closed loop's
# pipelined throughput: 80% of that overloads a fixed-rate load (session
# 12 measured a p50 of 3.5 ms with no attacker). Start from the closed-loop
# max and step down by SOAK_STEP until a SOAK_PROBE trial keeps up: at
# least 99.5% of the requests completed and p99 (from the intended send)
# within SOAK_P99_US. fero-bench's generator-bound flag is reported but not
# required: on 2 cores the generator shares the CPUs with three servers,
# and its lag p99 exceeds the 50 µs tick at every rate (it did down to a
# third of the closed-loop max). The soak runs at SOAK_FRACTION of that rate.
closed="not measured"
if [ -n "${SOAK_MAX:-}" ]; then
	max=$SOAK_MAX # an open-loop max measured before, on this machine
	echo "soak: open-loop max $max req/s (given)"
else
	./fero-bench run --systems fero --attach "$peers" -c 3 -s reqreply --runs 1 > "$out/max.txt" 2>&1
	closed=$(awk '/\* sacks:/ { gsub(",", "", $6); print $6; exit }' "$out/max.txt")
	[ -n "$closed" ] || { echo "soak: no max in $out/max.txt" >&2; exit 1; }
	echo "soak: closed-loop max $closed req/s"
	probe=${SOAK_PROBE:-20s}
	step=${SOAK_STEP:-0.85}
	p99max=${SOAK_P99_US:-10000}
	max=""
	try=$closed
	for _ in $(seq 1 15); do
		try=$(awk -v r="$try" 'BEGIN { printf "%d", r }')
		f="$out/probe-$try.txt"
		./fero-bench run --systems fero --attach "$peers" -c 3 -s rate --rate "$try" \
			--duration "$probe" --runs 1 > "$f" 2>&1 || true
		p99=$(awk '/^  latency / { print $4; exit }' "$f")
		done_=$(awk '/^  requested / { gsub(",", ""); for (i = 1; i <= NF; i++) if ($i == "completed") { sub("/s", "", $(i+1)); print $(i+1); exit } }' "$f")
		bound=$(grep -c 'generator-bound' "$f" || true)
		echo "soak: probe $try req/s: p99 ${p99:-?} µs, completed ${done_:-?}/s, generator-bound $bound"
		if [ -n "$p99" ] && [ -n "$done_" ] &&
			awk -v p="$p99" -v m="$p99max" -v d="$done_" -v r="$try" 'BEGIN { exit !(p <= m && d >= 0.995 * r) }'; then
			max=$try
			break
		fi
		try=$(awk -v r="$try" -v s="$step" 'BEGIN { print r * s }')
	done
	[ -n "$max" ] || { echo "soak: no probe rate kept up; see $out/probe-*.txt" >&2; exit 1; }
fi
rate=$(awk -v m="$max" -v f="$fraction" 'BEGIN { printf "%d", m * f }')
echo "soak: open-loop max $max req/s (closed loop $closed); load at $fraction of it: $rate req/s"

load() {
	if ! ./fero-bench run --systems fero --attach "$peers" -c 3 -s rate --rate "$rate" \
		--duration "$duration" --runs 1 > "$out/$1.txt" 2>&1; then
		echo "soak: the load ($1) failed:" >&2
		tail -n 5 "$out/$1.txt" >&2
		return 1
	fi
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

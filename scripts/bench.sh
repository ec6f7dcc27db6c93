#!/usr/bin/env bash
# make bench: fero beside its peers in one run, ending with the speed
# targets of issue 21 as ratios (fero-bench prints them). Redis (both
# drivers) and the original fero 1.7.1 join when this machine has them:
# redis-server installed, and Node with npm (the original is installed from
# npm's registry into ~/.cache/fero-bench on first use). What is missing is
# left out, saying so, and its targets read "not measured".
#
# One run of every scenario, 300,000 records of 100 B, one and three
# servers, fsync group beside Redis's appendfsync always, and a fixed rate
# at half of fero's own request→reply maximum: about four minutes on two
# cores. Quote nothing from it: published figures are medians of at least
# five interleaved runs (docs/benchmarking.md).
set -euo pipefail
go=${GO:-go}
systems=echo,fero
fsync=()
if command -v redis-server >/dev/null; then
	systems=$systems,redis,redis-rueidis
	fsync=(--fsync group)
else
	echo "bench: no redis-server (apt-get install redis-server): the Redis targets are not measured" >&2
	systems=$systems,fero-group
fi
if command -v node >/dev/null && command -v npm >/dev/null; then
	systems=$systems,fero-1.7.1
else
	echo "bench: no Node and npm: the original fero 1.7.1 is not measured" >&2
fi
set -x
exec $go run ./cmd/fero-bench run --systems "$systems" --baseline echo "${fsync[@]}" \
	-c 1,3 -s oneway,reqreply,roundtrip,rate --sweep 0.5 --sweep-base fero \
	--warmup 1s --duration 5s -m 100 -r 300000 -n 10000 --progress never "$@"

#!/usr/bin/env bash
# Runs fero's fault suite (cmd/fero-chaos): real fero servers in network
# namespaces of their own, faults on a seeded schedule, checked histories.
#
#   scripts/chaos.sh full  [fero-chaos run flags]   # make chaos
#   scripts/chaos.sh short [fero-chaos run flags]   # make chaos-short
#
# It needs root and ip, nft and tc (apt-get install iproute2 nftables).
# Without them, full fails and says why; short skips and says why, so a
# machine without them never fails `make test` (CI installs them).
set -euo pipefail
mode=${1:?usage: scripts/chaos.sh full|short [fero-chaos run flags]}
shift
go=${GO:-go}

why=()
[ "$(id -u)" = 0 ] || why+=("it needs root (network namespaces)")
for tool in ip:iproute2 nft:nftables tc:iproute2; do
	command -v "${tool%%:*}" >/dev/null || why+=("${tool%%:*} is missing (apt-get install ${tool#*:})")
done
if [ ${#why[@]} -eq 0 ]; then
	# Root and the tools are not enough in a container without the
	# capability to make namespaces: try one.
	probe="fero-netns-probe-$$"
	if ip netns add "$probe" 2>/dev/null; then
		ip netns del "$probe"
	else
		why+=("this machine does not allow network namespaces (ip netns add failed)")
	fi
fi
if [ ${#why[@]} -gt 0 ]; then
	msg=$(printf ' %s;' "${why[@]}")
	msg=${msg%;}
	if [ "$mode" = short ]; then
		echo "chaos-short: SKIP: the fault suite cannot run here:$msg" >&2
		exit 0
	fi
	echo "chaos: the fault suite cannot run here:$msg" >&2
	exit 1
fi

# A built binary, not go run: the runner re-executes itself as each
# client's workload process.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
"$go" build -o "$bin/fero-chaos" ./cmd/fero-chaos
"$bin/fero-chaos" run "$@"

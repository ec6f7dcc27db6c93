#!/usr/bin/env bash
# Runs the real UDP multicast discovery test inside a network namespace of
# its own, whose loopback carries multicast: nothing leaves this machine.
# Needs root and iproute2 (apt-get install iproute2).
set -euo pipefail
go=${GO:-go}
ns="fero-mc-$$"
bin=$(mktemp -d)/membership.test
"$go" test -c -race -o "$bin" ./internal/membership
ip netns add "$ns"
trap 'ip netns del "$ns"; rm -rf "$(dirname "$bin")"' EXIT
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip link set lo multicast on
ip netns exec "$ns" ip route add 224.0.0.0/4 dev lo
cd internal/membership
FERO_TEST_MULTICAST=1 ip netns exec "$ns" "$bin" -test.run 'TestRealMulticast' -test.v -test.count 3

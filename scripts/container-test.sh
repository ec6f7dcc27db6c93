#!/usr/bin/env bash
# The container check (issue 43, make test-container): builds fero's image
# (scripts/image.sh), starts three containers from it on one network with
# the cluster secret, and runs the demo's check: Majority writes, SIGKILL
# of all three, restart, and every container must then hold every key
# with one digest. Uses the docker engine at DOCKER_HOST or the default
# socket; with none answering and dockerd installed (Debian's docker.io),
# it starts one of its own under a temporary directory and stops it at
# the end. Everything it makes (containers, network, image, daemon) it
# removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
docker=${DOCKER:-docker}
[ -x /usr/bin/docker ] && docker=${DOCKER:-/usr/bin/docker}
keys=${KEYS:-100}
tag=fero-ctest-$$
image=fero:$tag
tmp=$(mktemp -d)
own_daemon=""
forward_policy=ACCEPT bridge_nf=0 bridge_nf6=0
cleanup() {
	set +e
	for i in 1 2 3; do $docker rm -f "$tag-n$i" >/dev/null 2>&1; done
	$docker network rm "$tag" >/dev/null 2>&1
	$docker image rm "$image" >/dev/null 2>&1
	if [ -n "$own_daemon" ]; then
		kill "$own_daemon" 2>/dev/null
		for _ in $(seq 1 50); do kill -0 "$own_daemon" 2>/dev/null || break; sleep 0.2; done
		# dockerd set the FORWARD policy to DROP and made bridges pass
		# through iptables (br_netfilter): every other bridge on the host,
		# the fault suite's and the netns tests' among them, would then
		# drop its traffic. Put back what was there.
		iptables -P FORWARD "$forward_policy" 2>/dev/null
		sysctl -qw net.bridge.bridge-nf-call-iptables="$bridge_nf" 2>/dev/null
		sysctl -qw net.bridge.bridge-nf-call-ip6tables="$bridge_nf6" 2>/dev/null
		ip link del docker0 2>/dev/null
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
if ! $docker info >/dev/null 2>&1; then
	command -v dockerd >/dev/null || { echo "container-test: no docker engine answers and no dockerd (apt-get install docker.io)" >&2; exit 1; }
	echo "container-test: starting a docker daemon of its own"
	forward_policy=$(iptables -S FORWARD 2>/dev/null | awk '$1 == "-P" { print $3; exit }')
	forward_policy=${forward_policy:-ACCEPT}
	bridge_nf=$(sysctl -n net.bridge.bridge-nf-call-iptables 2>/dev/null || echo 0)
	bridge_nf6=$(sysctl -n net.bridge.bridge-nf-call-ip6tables 2>/dev/null || echo 0)
	dockerd --data-root "$tmp/root" --exec-root "$tmp/exec" -H "unix://$tmp/docker.sock" --pidfile "$tmp/docker.pid" > "$tmp/dockerd.log" 2>&1 &
	own_daemon=$!
	export DOCKER_HOST="unix://$tmp/docker.sock"
	for _ in $(seq 1 100); do $docker info >/dev/null 2>&1 && break; sleep 0.2; done
	$docker info >/dev/null 2>&1 || { echo "container-test: dockerd did not start:" >&2; tail -5 "$tmp/dockerd.log" >&2; exit 1; }
fi
ENGINE=$docker IMAGE=$image "$root/scripts/image.sh"
mkdir -p "$tmp/secret"
(cd "$root" && go run ./cmd/fero secret) > "$tmp/secret/cluster.secret"
chmod 0644 "$tmp/secret/cluster.secret" # read by the image's user 65532
$docker network create "$tag" >/dev/null
seeds="$tag-n1:7946,$tag-n2:7946,$tag-n3:7946"
for i in 1 2 3; do
	$docker run -d --name "$tag-n$i" --network "$tag" -v "$tmp/secret:/etc/fero:ro" "$image" \
		serve users --id "n$i" --listen 0.0.0.0:7400 --bind 0.0.0.0:7946 --seeds "$seeds" \
		--cluster-secret-file /etc/fero/cluster.secret --data-dir /data --fsync group --multicast=false >/dev/null
done
user=$($docker inspect "$tag-n1" --format '{{.Config.User}}')
echo "container-test: 3 containers of $image on network $tag, user $user"
cred=(--cluster-secret-file /etc/fero/cluster.secret)
fero() { local n=$1; shift; $docker exec "$tag-n$n" fero "$@" --addr 127.0.0.1:7400 "${cred[@]}"; }
formed=""
end=$((SECONDS + 90))
while [ $SECONDS -lt $end ]; do
	if fero 1 status 2>/dev/null | grep -q "configuration: 3 servers"; then formed=1; break; fi
	sleep 0.5
done
[ -n "$formed" ] || {
	echo "container-test: no cluster of 3 within 90 s; n1's status and log:" >&2
	fero 1 status >&2 || true
	$docker logs "$tag-n1" 2>&1 | tail -5 >&2
	exit 1
}
echo "container-test: cluster formed; writing $keys keys (wait majority)"
for k in $(seq 1 "$keys"); do
	ok=""
	end=$((SECONDS + 30))
	while [ $SECONDS -lt $end ]; do
		if fero $(( k % 3 + 1 )) put --wait majority "key$k" "$k" >/dev/null 2>&1; then ok=1; break; fi
		sleep 0.2
	done
	[ -n "$ok" ] || { echo "container-test: put key$k failed" >&2; exit 1; }
done
echo "container-test: SIGKILL all three, then start them again"
$docker kill "$tag-n1" "$tag-n2" "$tag-n3" >/dev/null
$docker start "$tag-n1" "$tag-n2" "$tag-n3" >/dev/null
want=""
for i in 1 2 3; do
	line=""
	end=$((SECONDS + 90))
	while [ $SECONDS -lt $end ]; do
		line=$(fero $i status 2>/dev/null | grep "^this node:" || true)
		case "$line" in "this node: $keys keys,"*) break ;; esac
		sleep 0.5
	done
	echo "container-test: n$i after the restart: $line"
	case "$line" in "this node: $keys keys,"*) ;; *) echo "container-test: n$i does not hold the $keys keys" >&2; exit 1 ;; esac
	digest=$(echo "$line" | sed -n 's/.*digest \([0-9a-f]*\).*/\1/p')
	[ -z "$want" ] && want=$digest
	[ "$digest" = "$want" ] || { echo "container-test: n$i digest $digest, n1's $want" >&2; exit 1; }
done
got=$(fero 3 get key7)
[ "$got" = 7 ] || { echo "container-test: key7 read $got through n3" >&2; exit 1; }
echo "container-test: ok: every container holds the $keys keys, digest $want"

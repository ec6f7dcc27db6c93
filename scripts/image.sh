#!/usr/bin/env bash
# Builds fero's container image (Dockerfile: FROM scratch, a static
# binary, CA certificates, user 65532) with the engine given in ENGINE
# (docker, or podman), tagged IMAGE (fero:latest). The binary is built
# here, not in a build stage, so that no base image is pulled.
#
#   ./scripts/image.sh                     # fero:latest with docker
#   ENGINE=podman IMAGE=fero:dev ./scripts/image.sh
set -euo pipefail
engine=${ENGINE:-docker}
image=${IMAGE:-fero:latest}
go=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/etc/ssl/certs" "$ctx/data"
(cd "$root" && CGO_ENABLED=0 $go build -trimpath -o "$ctx/fero" ./cmd/fero)
certs=""
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
	[ -f "$f" ] && { certs=$f; break; }
done
[ -n "$certs" ] || { echo "image: no CA certificate bundle on this machine (apt-get install ca-certificates)" >&2; exit 1; }
cp "$certs" "$ctx/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n' > "$ctx/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$ctx/etc/group"
cp "$root/Dockerfile" "$ctx/Dockerfile"
"$engine" build -q -t "$image" "$ctx"
"$engine" image inspect --format '{{.Size}}' "$image" | awk -v i="$image" '{ printf "image: %s, %.1f MB\n", i, $1 / 1e6 }'

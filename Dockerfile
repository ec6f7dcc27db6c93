# The fero CLI (fero serve) in an image FROM scratch: one static binary,
# the system's CA certificates, a passwd entry for the non-root user
# 65532 and an empty /data it owns. Nothing is pulled from a registry.
#
# Build it with `make image` (scripts/image.sh), which compiles the binary
# and assembles the build context this file expects:
#   fero                      CGO_ENABLED=0 go build -trimpath ./cmd/fero
#   etc/ssl/certs/ca-certificates.crt, etc/passwd, etc/group
#   data/                     an empty directory
FROM scratch
COPY etc/ /etc/
COPY --chown=65532:65532 data/ /data/
COPY fero /usr/local/bin/fero
USER 65532:65532
VOLUME /data
EXPOSE 7400 7946 7946/udp 9400
ENTRYPOINT ["/usr/local/bin/fero"]
CMD ["--help"]

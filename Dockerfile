# The fero CLI (fero serve) in a small image, for deploy/kubernetes.
# Build: docker build -t fero:latest .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/fero ./cmd/fero

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fero /usr/local/bin/fero
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fero"]

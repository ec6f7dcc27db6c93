# fero's front door. `make help` lists the targets.

GO            ?= go
BIN           := $(CURDIR)/.bin
STATICCHECK   := $(BIN)/staticcheck
# Pinned: staticcheck 2026.1 (module version v0.7.0).
STATICCHECK_VERSION := v0.7.0
# Fuzz budget per target, in executions: a short pass in `make test`, a
# long one in `make fuzz`. Counts, not durations: with a duration, Go 1.26's
# fuzz coordinator can fail a target with "context deadline exceeded" as the
# time runs out (golang/go#75804, fixed in Go 1.27).
FUZZTIME_SHORT ?= 30000x
FUZZTIME       ?= 3000000x
TEST_TIMEOUT   ?= 20m

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Quick start: a three-process fero cluster on loopback replicates writes to every node.
	$(GO) run ./examples/cluster

.PHONY: test
test: vet ## vet, the race-enabled short test suite, and a short fuzz pass (the CI command).
	$(GO) test -race -short -timeout $(TEST_TIMEOUT) ./...
	./scripts/fuzz.sh $(FUZZTIME_SHORT)

.PHONY: test-long
test-long: vet ## The full suite with -race, including the large cluster and scale tests.
	$(GO) test -race -timeout 90m ./...

.PHONY: test-multicast
test-multicast: ## Real UDP multicast discovery in a network namespace of its own (needs root, iproute2).
	./scripts/multicast-test.sh

.PHONY: vet
vet: ## go vet over every package.
	$(GO) vet ./...

.PHONY: lint
lint: vet $(STATICCHECK) ## gofmt, vet and staticcheck (installed into .bin at a pinned version).
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: the files above need formatting" >&2; exit 1)
	$(STATICCHECK) ./...

$(STATICCHECK):
	GOBIN=$(BIN) GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

.PHONY: fuzz
fuzz: ## Every fuzz target for FUZZTIME executions each (default 3,000,000).
	./scripts/fuzz.sh $(FUZZTIME)

.PHONY: bench
bench: ## Go micro-benchmarks (benchstat-ready, -count=5), the transport's short profile and fero against the echo floor.
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./internal/... | tee bench.out
	$(GO) run ./cmd/fero-bench transport --short
	$(GO) run ./cmd/fero-bench run --systems echo,fero --baseline echo -r 100000 -n 2000 -s oneway,reqreply,roundtrip --progress never

.PHONY: generate
generate: ## Regenerate every generated file.
	$(GO) generate ./...

.PHONY: checkgenerate
checkgenerate: generate ## Fail if generated files are stale.
	@git diff --exit-code -- . || (echo "generated files are stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain --untracked-files=all -- . | grep -v '^??.*\.bin/')" || (git status --short; echo "generate produced untracked files" >&2; exit 1)

.PHONY: tidy-check
tidy-check: ## Fail if go.mod/go.sum are not tidy.
	$(GO) mod tidy -diff

.PHONY: clean
clean: ## Remove build and tool output.
	rm -rf $(BIN) bench.out

.DEFAULT_GOAL := help

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: ## run the tests (the README's command)
	go test ./...

race: ## run the tests under the race detector
	go test -race -count=1 ./...

fuzz-smoke: ## run every fuzz target for 10s
	./scripts/fuzz.sh 10s

fuzz-long: ## run every fuzz target for 10m (release profile)
	./scripts/fuzz.sh 10m

bench: ## run the paired benchmarks (oncekv vs bare bbolt)
	go test ./bench -run '^$$' -bench . -benchtime 20000x

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet ./...

ci: ## what CI runs
	bash .ci/run

.PHONY: help test race fuzz-smoke fuzz-long bench lint ci

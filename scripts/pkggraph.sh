#!/usr/bin/env bash
# Regenerates the package graph in docs/ from `go list` (make docs-graph):
# docs/packages.svg (needs Graphviz's dot) and the Mermaid block between the
# markers in docs/architecture.md. Never edit either by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(./... ./cmd/oncekv/... ./examples/...)
for m in otel etcdkv; do if [ -f "$m/go.mod" ]; then pkgs+=("./$m/..."); fi; done
go run ./scripts/pkggraph -format dot "${pkgs[@]}" | dot -Tsvg -o docs/packages.svg
go run ./scripts/pkggraph -format mermaid -md docs/architecture.md ./...
echo "docs/packages.svg and docs/architecture.md regenerated"

// Command pkggraph draws the import graph of oncekv's packages from
// `go list`, as Graphviz dot (for docs/packages.svg) or as a Mermaid
// flowchart (embedded in docs/architecture.md). Run it through
// scripts/pkggraph.sh; it is never hand-edited.
package main

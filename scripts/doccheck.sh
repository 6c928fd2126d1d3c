#!/usr/bin/env bash
# Lists the packages of every module without a doc.go (where the package
# comment explains its model), and the library packages without a runnable
# example (a func Example in a _test.go file, with its // Output: checked,
# or go test never runs it): every package outside
# internal/ and examples/ (programs that are examples themselves) that is
# not a command, test kits (*test) excepted, as they take a *testing.T.
# Fails if there is one. CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/modules.sh
missing=0
while read -r dir name import; do
  rel=${dir#"$PWD"/}
  if [ ! -f "$dir/doc.go" ]; then
    echo "no doc.go in $rel"
    missing=1
  fi
  case "$import" in */internal/* | */internal | */oncekv/examples/*) continue ;; esac
  case "$name" in main | *test) continue ;; esac
  if ! grep -qs '^func Example' "$dir"/*_test.go; then
    echo "no runnable example (func Example...) in $rel"
    missing=1
  elif ! grep -qsE '^[[:space:]]*// (Unordered output|Output):' "$dir"/*_test.go; then
    # Without an output comment go test compiles an example but never runs it.
    echo "no example with its output checked (// Output:) in $rel"
    missing=1
  fi
done < <(go list -f '{{.Dir}} {{.Name}} {{.ImportPath}}' "${MODULES[@]}")
exit $missing

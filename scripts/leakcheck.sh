#!/usr/bin/env bash
# Lists the test packages of every module whose TestMain does not check for
# goroutine leaks (goleak.VerifyTestMain, goleak.Find or
# kvtest.RunWithoutLeaks), and fails if there is one. CI runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/modules.sh
missing=0
for dir in $(go list -f '{{.Dir}}' "${MODULES[@]}"); do
  ls "$dir"/*_test.go >/dev/null 2>&1 || continue
  if ! grep -qE 'goleak\.(VerifyTestMain|Find)|RunWithoutLeaks' "$dir"/*_test.go; then
    echo "no goroutine leak check in ${dir#"$PWD"/}"
    missing=1
  fi
done
exit $missing

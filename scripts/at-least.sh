#!/usr/bin/env bash
# at-least.sh N CMD...: runs a `cargo test` command that picks its tests by name, and fails
# unless they all passed and at least N of them ran. A filter that a rename left matching
# nothing runs 0 tests, and cargo calls that a pass; this does not.
set -uo pipefail
want=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
ran=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed.*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
if [ "$ran" -lt "$want" ]; then
    echo "at-least: $ran tests passed, $want expected: a test filter selects fewer than it should ($*)" >&2
    exit 1
fi
echo "at-least: $ran tests passed (at least $want expected)"

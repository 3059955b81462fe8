#!/usr/bin/env bash
# Fuzzes the per-packet decision (fuzz/fuzz_targets/packet_path.rs) with cargo-fuzz on the
# installed nightly toolchain, for RUNS executions or SECONDS, whichever comes first.
# Installs cargo-fuzz when missing. Prints libFuzzer's final line (executions, coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10000000}
SECONDS_MAX=${SECONDS_MAX:-1200}
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
cd fuzz
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo +nightly fuzz run packet_path -- -runs="$RUNS" -max_total_time="$SECONDS_MAX" \
    -print_final_stats=1 2>&1 | tee "$log" | grep -E "^#[0-9]+[[:space:]]+(pulse|DONE)|^Done|ERROR|panicked" || true
rc=${PIPESTATUS[0]}
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov:" "$log" | tail -3
exit "$rc"

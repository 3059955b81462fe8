#!/usr/bin/env bash
# Fuzzes each target (fuzz/fuzz_targets/: packet_path, the per-packet decision; chain_path, the
# poller's multi-buffer path on packets cut into chains; config_parse,
# the config and routes file; netlink_events, the control thread against a model of the
# kernel's state) with cargo-fuzz on the nightly toolchain, for RUNS executions or
# SECONDS_MAX seconds each, whichever comes first, starting from the committed seeds
# (fuzz/seeds/TARGET). TARGETS="..." picks some. Installs the nightly toolchain and cargo-fuzz
# when missing. Prints libFuzzer's final lines (executions, coverage); exits non-zero when
# libFuzzer finds a crash or a failed assertion in any target.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-10000000}
SECONDS_MAX=${SECONDS_MAX:-1200}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
TARGETS=${TARGETS:-packet_path chain_path config_parse netlink_events}
cd fuzz
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for target in $TARGETS; do
    echo "fuzz: $target"
    # libFuzzer's status decides (a crash or a failed assertion is non-zero): read it from
    # the pipeline itself, not after a `|| true` (whose own status PIPESTATUS would then hold).
    set +e
    # New inputs go to corpus/ (ignored by git); seeds/ is the committed, minimized corpus
    # (`cargo +nightly fuzz cmin TARGET corpus/TARGET`, then copied to seeds/).
    mkdir -p "corpus/$target" "seeds/$target"
    cargo +nightly fuzz run "$target" "corpus/$target" "seeds/$target" -- \
        -runs="$RUNS" -max_total_time="$SECONDS_MAX" \
        -print_final_stats=1 2>&1 | tee "$log" | grep -E "^#[0-9]+[[:space:]]+(pulse|DONE)|^Done|ERROR|panicked"
    rc=${PIPESTATUS[0]}
    set -e
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov:" "$log" | tail -3 || true
    if [ "$rc" -ne 0 ]; then
        echo "fuzz: $target FAILED (status $rc)" >&2
        status=$rc
    fi
done
exit "$status"

#!/usr/bin/env bash
# The forwarding table under the nightly toolchain's checkers (installed when missing):
# Miri on its unit tests (undefined behaviour, data races between atomics and plain accesses,
# alignment), ThreadSanitizer on the churn oracle (readers racing the writer, for CHURN_SECS,
# 10 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup +nightly component list --installed 2>/dev/null | grep -q '^miri'; then
    echo "sanitize: installing the nightly toolchain with miri and rust-src"
    rustup toolchain install nightly --profile minimal --component miri,rust-src
fi
host=$(rustc -vV | sed -n 's/^host: //p')

echo "== Miri: fib::tests, fib::qsbr, fib::warm_map"
cargo +nightly miri setup >/dev/null
MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}" scripts/at-least.sh 18 \
    cargo +nightly miri test -p dataplane --lib -- fib::tests fib::qsbr fib::warm_map

echo "== ThreadSanitizer: fib::churn (${CHURN_SECS:-10} s)"
RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR=target/tsan scripts/at-least.sh 2 \
    cargo +nightly test -Zbuild-std --target "$host" -p dataplane --lib -- fib::churn --nocapture

#!/usr/bin/env bash
# The main job on throwaway netns testbeds, in about a minute: 64-byte UDP from gen through the
# dataplane (l3fwd) to sink, once per layout, then Linux forwarding and in-kernel XDP forwarding
# for comparison; prints the table (forwarded Mpps, DUT CPU ns per packet, drops by reason) and
# writes SVG plots to bench/out/demo/. Tears every testbed down, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo: needs root (network namespaces, XDP); run: sudo make demo" >&2
    exit 1
fi
if [ "$(nproc)" -lt 2 ]; then
    echo "demo: needs 2 CPUs (generator and DUT on separate CPUs); this machine has $(nproc)" >&2
    exit 1
fi
exec target/release/dataplane bench --matrix bench/matrices/demo.toml --out bench/out/demo

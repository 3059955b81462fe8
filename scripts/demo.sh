#!/usr/bin/env bash
# The main job on a throwaway netns testbed: 64-byte UDP from gen through the dataplane (l3fwd)
# to sink for ~10 s; prints forwarded Mpps, drops by reason and the DUT's CPU ns per packet;
# then the same for the Linux kernel forwarding on the same testbed, for comparison.
# Tears everything down, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo: needs root (network namespaces, XDP); run: sudo make demo" >&2
    exit 1
fi
gen_cpu=0
dut_cpu=$(( $(nproc) > 1 ? 1 : 0 ))
echo "demo: gen on CPU $gen_cpu, dataplane poller on CPU $dut_cpu; 2 s warm-up, 10 s measured"
exec python3 bench/fwd_compare.py --duts l3fwd,kernel --reps 1 --warmup 2 --window 10 \
    --gen-cpu "$gen_cpu" --dut-cpu "$dut_cpu"

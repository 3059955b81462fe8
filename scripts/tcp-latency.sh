#!/usr/bin/env bash
# TCP throughput and ping RTT through the DUT, side by side (issue 12, item 2): Linux
# forwarding against the dataplane with each idle mode (adaptive, sleep, busy), on one
# gen <-> dut <-> sink testbed. iperf3 with 1 and 8 streams (1500-byte frames; the testbed's
# hosts compute checksums in software, as a NIC on a wire delivers them), then 200 pings 10 ms
# apart. Prints a table. Needs root and a release build (make build). Not part of make test.
#   scripts/tcp-latency.sh [SECONDS per iperf3 run, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
BIN=target/release/dataplane
[ "$(id -u)" -eq 0 ] || { echo "tcp-latency: needs root" >&2; exit 1; }
[ -x "$BIN" ] || { echo "tcp-latency: $BIN missing: run make build" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "tcp-latency: iperf3 missing: run make deps" >&2; exit 1; }
P="tl$(( $$ % 100000 ))"
OUT=$(mktemp -d)
DUT_PID=
cleanup() {
    [ -n "$DUT_PID" ] && kill "$DUT_PID" 2>/dev/null || true
    pkill -f "iperf3 -s -p 5299" 2>/dev/null || true
    wait 2>/dev/null || true
    "$BIN" testbed down --prefix "$P"
}
trap cleanup EXIT
"$BIN" testbed up --prefix "$P" >/dev/null
SINK=198.19.0.1
ip netns exec "$P-sink" iperf3 -s -p 5299 -D --logfile "$OUT/iperf3-server.log"
sleep 0.5

measure() { # name
    local name=$1 one eight rtt
    one=$(ip netns exec "$P-gen" iperf3 -c "$SINK" -p 5299 -t "$SECS" -J 2>/dev/null \
        | python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/1e9, 2))" || echo "failed")
    eight=$(ip netns exec "$P-gen" iperf3 -c "$SINK" -p 5299 -t "$SECS" -P 8 -J 2>/dev/null \
        | python3 -c "import json,sys; print(round(json.load(sys.stdin)['end']['sum_received']['bits_per_second']/1e9, 2))" || echo "failed")
    rtt=$(ip netns exec "$P-gen" ping -q -c 200 -i 0.01 "$SINK" 2>/dev/null \
        | awk -F'[/ ]' '/rtt|round-trip/ {print $8 " / " $9 " / " $10}' || echo "failed")
    printf "| %s | %s | %s | %s |\n" "$name" "$one" "$eight" "$rtt" | tee -a "$OUT/table"
}

echo "| DUT | TCP 1 stream Gbit/s | TCP 8 streams Gbit/s | ping RTT avg / max / mdev ms |" | tee "$OUT/table"
echo "|---|---|---|---|" | tee -a "$OUT/table"
ip netns exec "$P-dut" sysctl -qw net.ipv4.ip_forward=1
measure "kernel"
ip netns exec "$P-dut" sysctl -qw net.ipv4.ip_forward=0
for idle in adaptive sleep busy; do
    "$BIN" testbed config --prefix "$P" --cpus 1 \
        | sed "s/^\[dataplane\]$/[dataplane]\nidle = \"$idle\"/" > "$OUT/dut-$idle.toml"
    ip netns exec "$P-dut" "$BIN" run --config "$OUT/dut-$idle.toml" --interval 0 \
        > "$OUT/dut-$idle.out" 2> "$OUT/dut-$idle.err" &
    DUT_PID=$!
    for _ in $(seq 100); do grep -q "^attached" "$OUT/dut-$idle.err" && break; sleep 0.1; done
    measure "dataplane l3fwd, idle = $idle"
    kill "$DUT_PID"; wait "$DUT_PID" 2>/dev/null || true; DUT_PID=
done
echo "tcp-latency: files in $OUT"

#!/usr/bin/env bash
# The soak: the DUT forwards the generator's full rate for MINUTES (default 10) on its own
# netns testbed, with its routes from the kernel (`routes = "kernel"`), while its metrics are
# scraped every second, 100 route changes a second churn the kernel's table (routes other than
# the one in use) and a SIGHUP reload comes every 10 s. At the end it checks that every UMEM
# frame is accounted for, that RSS did not grow after the warm-up, that rx = tx + drops per
# poller, that the last scraped tx counter agrees with the sink's count, and that the churn
# and the reloads were applied. Not part of `make test`. Needs root and a release build
# (make build).
#   scripts/soak.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
SECS=$((MINUTES * 60))
BIN=target/release/dataplane
PORT=9441
[ "$(id -u)" -eq 0 ] || { echo "soak: needs root (network namespaces, XDP)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "soak: $BIN missing: run make build" >&2; exit 1; }
P="sk$(( $$ % 100000 ))"
OUT=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$BIN" testbed down --prefix "$P"
}
trap cleanup EXIT

"$BIN" testbed up --prefix "$P" >/dev/null
# Ports and the poller only: routes and neighbours come from the kernel.
"$BIN" testbed config --prefix "$P" --cpus 1 | awk '/^\[\[routes\]\]/ {exit} {print}' \
    | sed 's/^\[dataplane\]$/[dataplane]\nroutes = "kernel"/' > "$OUT/dut.toml"
ip netns exec "$P-sink" "$BIN" sink --iface "$P-s0" --duration $((SECS + 10)) --json "$OUT/sink.json" > /dev/null 2>&1 &
SINK=$!
pids+=($SINK)
ip netns exec "$P-dut" "$BIN" run --config "$OUT/dut.toml" --duration $((SECS + 8)) --interval 0 \
    --metrics "$PORT" --json "$OUT/dut.json" > "$OUT/dut.out" 2> "$OUT/dut.err" &
DUT=$!
pids+=($DUT)
sleep 2
ip netns exec "$P-gen" "$BIN" gen --iface "$P-g0" --duration "$SECS" --cpu 0 --background \
    --json "$OUT/gen.json" > /dev/null &
pids+=($!)
# One line per second: seconds, DUT RSS (kB), scraped tx packets.
scrape() {
    ip netns exec "$P-dut" python3 -c "
import sys, urllib.request
t = urllib.request.urlopen('http://127.0.0.1:$PORT/metrics', timeout=2).read().decode()
print(sum(float(l.rsplit(' ', 1)[1]) for l in t.splitlines() if l.startswith('dataplane_tx_packets_total{')))
" 2>/dev/null || echo nan
}
dut_pid=$(pgrep -n -f "run --config $OUT/dut.toml")
# The churn: 100 changes a second to 200 routes the traffic does not use, through one ip -batch.
python3 -c "
import sys, time
start, n = time.monotonic(), 0
while time.monotonic() - start < $SECS:
    k = n % 200
    verb = 'add' if (n // 200) % 2 == 0 else 'del'
    print(f'route {verb} 10.{k // 100}.{k % 100}.0/24 via 198.19.0.1', flush=True)
    n += 1
    time.sleep(max(0.0, start + n / 100 - time.monotonic()))
print(n, file=open('$OUT/churned', 'w'))
" | ip netns exec "$P-dut" ip -force -batch - > /dev/null 2>&1 &
pids+=($!)
hups=0
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt $((SECS + 3)) ]; do
    t=$(( $(date +%s) - start ))
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$dut_pid/status" 2>/dev/null || echo 0)
    echo "$t $rss $(scrape)" >> "$OUT/samples"
    if [ "$t" -gt 0 ] && [ $((t % 10)) -eq 0 ] && [ "$t" -lt "$SECS" ]; then
        kill -HUP "$dut_pid" && hups=$((hups + 1))
    fi
    sleep 1
done
echo "$hups" > "$OUT/hups"
last_tx=$(scrape)
# Both ran for a fixed time and stop by themselves: either exiting non-zero fails the soak.
wait "$DUT" || { echo "soak: the dataplane exited with status $?" >&2; exit 1; }
wait "$SINK" || { echo "soak: the sink exited with status $?" >&2; exit 1; }
echo "soak: run files (summary, samples) in $OUT"
python3 - "$OUT" "$MINUTES" "$last_tx" <<'EOF'
import json, sys
out, minutes, last_tx = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
samples = [l.split() for l in open(f"{out}/samples")]
rss = [(int(s[0]), int(s[1])) for s in samples if s[1].isdigit() and int(s[1]) > 0]
warm = [r for t, r in rss if t >= 30] or [r for _, r in rss]
dut = json.load(open(f"{out}/dut.json"))
sink = json.load(open(f"{out}/sink.json"))
gen = json.load(open(f"{out}/gen.json"))
ok = True
def check(what, cond, detail):
    global ok
    ok &= bool(cond)
    print(f"{'ok  ' if cond else 'FAIL'} {what}: {detail}")
print(f"soak {minutes:g} min: offered {gen['packets'] / gen['seconds'] / 1e6:.3f} Mpps, "
      f"forwarded {dut['totals']['counters'][2] / dut['elapsed_s'] / 1e6:.3f} Mpps")
# Every frame in a known place: the poller's free list, a fill/RX/TX/completion ring, or held
# by the kernel (counted per socket from what it was given and gave back: the pool's cache
# after an RX-ring-full drop); all home once the sockets closed. More than a burst's worth
# held would be a leak.
for r in dut["reports"]:
    f = r["frames"]
    check(f"poller {r['id']} frames accounted", dut["frames_ok"] and f["held"] <= 64,
          f"{f['total']} = free {f['free']} + fill {f['fill']} + tx {f['tx']} + completion "
          f"{f['completion']} + rx {f['rx']} + held {f['held']}; after closing "
          f"{f['free_after_close']} free")
for i, p in enumerate(dut["pollers"]):
    rx, tx, drops = p["counters"][0], p["counters"][2], sum(p["drops"])
    icmp = p["counters"][11]
    check(f"poller {i} rx = tx + drops", rx + icmp == tx + drops,
          f"rx {rx} + icmp {icmp} vs tx {tx} + drops {drops}")
check("RSS flat after warm-up", max(warm) <= warm[0] * 1.02 + 1024,
      f"{warm[0]} kB at 30 s, {warm[-1]} kB at the end, max {max(warm)} kB")
matched = sink["matched"]
check("scraped tx agrees with the sink", abs(last_tx - matched) <= max(1, 0.001 * matched),
      f"last scrape {last_tx:.0f}, sink {matched} generator frames")
churned = int(open(f"{out}/churned").read().split()[0])
hups = int(open(f"{out}/hups").read().split()[0])
c = dut["control"]
check("route churn applied", c["changes"] >= churned * 0.99,
      f"{churned} route changes sent, {c['changes']} applied, {c['resyncs']} re-reads")
check("SIGHUP reloads applied", c["reloads"] == hups and c["reloads_refused"] == 0,
      f"{hups} sent, {c['reloads']} applied, {c['reloads_refused']} refused")
sys.exit(0 if ok else 1)
EOF

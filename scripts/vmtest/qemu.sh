#!/usr/bin/env bash
# Fetches the QEMU the vmtest guests run on and unpacks it under target/vm/qemu, never
# installing it: the newest qemu-system-x86 of bookworm-backports (>= 10: eBPF RSS that
# libbpf 1.x loads, and the igb device), found and downloaded through an apt configuration
# of our own under target/vm/apt-qemu (the host's sources are never read or changed).
# Only what bookworm lacks comes from backports (QEMU's own packages and seabios); the
# shared libraries it links come from bookworm through scripts/deps.sh, only when missing.
# Prints nothing and does nothing when target/vm/qemu already holds that version.
# Needs: apt-get, dpkg-deb (make vmtest has them).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=target/vm/qemu
A=$(pwd)/target/vm/apt-qemu
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" target/vm/cache
cat >"$A/sources.list" <<EOF
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-backports main
EOF
APT=(-o "Dir::Etc::sourcelist=$A/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Dir::State::status=/dev/null")
# The newest version of a package in these lists, or nothing.
newest() {
    { apt-cache "${APT[@]}" madison "$1" 2>/dev/null || true; } | awk -F'|' '{gsub(/ /, "", $2); print $2}' | sort -V | tail -1
}
ver=$(newest qemu-system-x86)
if [ -z "$ver" ] || ! dpkg --compare-versions "$ver" ge 1:10; then
    apt-get "${APT[@]}" update -qq >/dev/null || true
    ver=$(newest qemu-system-x86)
fi
if [ -z "$ver" ] || ! dpkg --compare-versions "$ver" ge 1:10; then
    echo "vmtest: no qemu-system-x86 >= 10 in bookworm-backports (newest seen: ${ver:-none}; is deb.debian.org reachable?)" >&2
    exit 1
fi
if [ -x "$OUT/usr/bin/qemu-system-x86_64" ] && [ "$(cat "$OUT/version" 2>/dev/null)" = "$ver" ]; then
    exit 0
fi
seabios=$(newest seabios)
if [ -z "$seabios" ]; then
    echo "vmtest: no seabios in the private apt lists under $A" >&2
    exit 1
fi
fetch=("qemu-system-x86=$ver" "qemu-system-common=$ver" "qemu-system-data=$ver" "seabios=$seabios")
CACHE=$(pwd)/target/vm/cache
debs=()
for spec in "${fetch[@]}"; do
    name=${spec%%=*} v=${spec#*=}
    deb=$(ls "$CACHE"/"$name"_*"${v#*:}"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
        echo "vmtest: downloading $name $v"
        (cd "$CACHE" && apt-get "${APT[@]}" download -q "$spec" >/dev/null 2>&1) || {
            echo "vmtest: apt-get download $spec failed (is a package mirror reachable?)" >&2
            exit 1
        }
        deb=$(ls "$CACHE"/"$name"_*"${v#*:}"_*.deb | head -1)
    fi
    debs+=("$deb")
done
# The libraries (and ipxe-qemu's option ROMs) these packages depend on, from bookworm:
# every Depends name but the fetched packages themselves.
needed=$(for deb in "${debs[@]}"; do dpkg-deb -f "$deb" Depends; done |
    tr ',' '\n' | sed -E 's/\(.*\)//; s/\|.*//; s/ //g' | grep -v '^$' |
    grep -vxE 'qemu-system-common|qemu-system-data|seabios' | sort -u)
# shellcheck disable=SC2086
scripts/deps.sh $needed
rm -rf "$OUT.new"
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$OUT.new"; done
# ldd says "not found" for a missing library on stdout and for a missing symbol version
# (a library too old) on stderr.
missing=$(ldd "$OUT.new/usr/bin/qemu-system-x86_64" 2>&1 | grep "not found" || true)
if [ -n "$missing" ]; then
    echo "vmtest: QEMU $ver lacks shared libraries (or has ones too old):" >&2
    echo "$missing" >&2
    exit 1
fi
echo "$ver" >"$OUT.new/version"
rm -rf "$OUT"
mv "$OUT.new" "$OUT"
echo "vmtest: QEMU $ver under $OUT"

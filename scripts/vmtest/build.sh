#!/usr/bin/env bash
# Builds a vmtest guest under target/vm/KIND: a Debian kernel (downloaded as packages and
# unpacked, never installed on the host) and an initramfs made here from busybox-static, the
# kernel modules the guest needs (9p for the host's root, virtio_net, igb, 8021q) and
# scripts/vmtest/init. Rebuilt only when missing or older than the init script or this one.
#   KIND=copy (default): Debian's 6.12 from the host's apt lists. Its virtio_net binds AF_XDP
#     in copy mode only (no zero-copy transmit, no xsk-zerocopy feature).
#   KIND=zc: the newest Debian kernel in trixie-backports (>= 6.13: virtio_net zero-copy
#     receive and transmit), found and downloaded through an apt configuration of our own
#     under target/vm/apt: the host's sources are never read or changed.
# Needs: apt-get (the package lists), dpkg-deb, depmod (kmod), busybox-static, cpio, xz (make
# vmtest installs them when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
KIND=${1:-copy}
case "$KIND" in copy | zc) ;; *)
    echo "vmtest: unknown guest kind $KIND (copy or zc)" >&2
    exit 1
    ;;
esac
OUT=target/vm/$KIND
mkdir -p "$OUT" target/vm/cache
if [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.gz" ] && [ "$OUT/initramfs.gz" -nt scripts/vmtest/init ] &&
    [ "$OUT/initramfs.gz" -nt scripts/vmtest/build.sh ]; then
    exit 0
fi
CACHE=$(pwd)/target/vm/cache
case "$KIND" in
copy)
    APT=()
    pattern='^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$'
    ;;
zc)
    # A private apt: its own source list, lists and cache; no status file (nothing installed).
    A=$(pwd)/target/vm/apt
    mkdir -p "$A/lists/partial" "$A/cache/archives/partial"
    echo "deb http://deb.debian.org/debian trixie-backports main" >"$A/sources.list"
    APT=(-o "Dir::Etc::sourcelist=$A/sources.list" -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::lists=$A/lists" -o "Dir::Cache=$A/cache" -o "Dir::State::status=/dev/null")
    # trixie splits the kernel: linux-binary-* (the image) and linux-modules-*.
    pattern='^linux-binary-[0-9]+\.[0-9]+\.[0-9]+\+deb[0-9]+-amd64$'
    ;;
esac
newest() {
    { apt-cache "${APT[@]}" pkgnames 2>/dev/null || true; } | { grep -E "$pattern" || true; } | sort -V | tail -1
}
pkg=$(newest)
if [ -z "$pkg" ]; then
    # Its errors shown: an unreachable mirror, or (zc on a non-Debian host) no Debian
    # archive keyring to check trixie-backports' signature with.
    apt-get "${APT[@]}" update -qq >/dev/null || true
    pkg=$(newest)
fi
if [ -z "$pkg" ]; then
    echo "vmtest: no package matching $pattern in the apt lists (is deb.debian.org reachable, and debian-archive-keyring installed?)" >&2
    exit 1
fi
pkgs=("$pkg")
[ "$KIND" = zc ] && pkgs+=("${pkg/linux-binary-/linux-modules-}")
debs=()
for p in "${pkgs[@]}"; do
    deb=$(ls "$CACHE"/"$p"_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
        echo "vmtest: downloading $p"
        (cd "$CACHE" && apt-get "${APT[@]}" download -q "$p" >/dev/null 2>&1) || {
            echo "vmtest: apt-get download $p failed (is a package mirror reachable?)" >&2
            exit 1
        }
        deb=$(ls "$CACHE"/"$p"_*.deb | head -1)
    fi
    debs+=("$deb")
done
rm -rf "$OUT/kernel" "$OUT/initramfs"
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$OUT/kernel"; done
# trixie's packages put modules and image under /usr/lib/modules: depmod -b reads lib/modules.
if [ -d "$OUT/kernel/usr/lib/modules" ]; then
    mkdir -p "$OUT/kernel/lib"
    mv "$OUT/kernel/usr/lib/modules" "$OUT/kernel/lib/modules"
fi
kver=$(ls "$OUT/kernel/lib/modules" | head -1)
# The package ships no modules.dep (made at install time): make it for the unpacked tree.
depmod -b "$OUT/kernel" "$kver"
if [ -f "$OUT/kernel/boot/vmlinuz-$kver" ]; then
    cp "$OUT/kernel/boot/vmlinuz-$kver" "$OUT/vmlinuz.new"
else
    cp "$OUT/kernel/lib/modules/$kver/vmlinuz" "$OUT/vmlinuz.new"
fi

root="$OUT/initramfs"
mkdir -p "$root"/{bin,dev,proc,sys,host,lib/modules}
cp /bin/busybox "$root/bin/busybox"
cp scripts/vmtest/init "$root/init"
chmod 755 "$root/init"
# The modules and what they depend on, in load order (modules.dep lists each module's
# dependencies; they go first). Compressed modules are unpacked: busybox insmod reads plain ELF.
moddir="$OUT/kernel/lib/modules/$kver"
declare -A seen=()
order=()
add() {
    local name=$1 path deps d
    [ -n "${seen[$name]:-}" ] && return 0
    seen[$name]=1
    path=$(grep -E "(^|/)$name\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | head -1 | cut -d: -f1)
    if [ -z "$path" ]; then
        echo "vmtest: module $name not in $kver (built in?)" >&2
        return 0
    fi
    deps=$(grep -E "^$path:" "$moddir/modules.dep" | cut -d: -f2)
    for d in $deps; do add "$(basename "$d" | sed -E 's/\.ko(\.[a-z]+)?$//')"; done
    case "$path" in
        *.xz) xz -dc "$moddir/$path" >"$root/lib/modules/$name.ko" ;;
        *.zst) zstd -dqc "$moddir/$path" >"$root/lib/modules/$name.ko" ;;
        *.gz) gzip -dc "$moddir/$path" >"$root/lib/modules/$name.ko" ;;
        *) cp "$moddir/$path" "$root/lib/modules/$name.ko" ;;
    esac
    order+=("$name")
}
# 8021q: the VLAN sub-interface check (the host running the tests may lack the module).
# igb: the Intel 82576 boot (with dca and i2c-algo-bit, from modules.dep). veth: the netns
# testbed of tests/kernel_vlan.rs, run in the guest for its 802.1Q.
for m in netfs 9pnet 9pnet_virtio 9p failover net_failover virtio_net 8021q igb veth; do add "$m"; done
printf '%s\n' "${order[@]}" >"$root/lib/modules/order"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$OUT/initramfs.gz.new"
mv "$OUT/vmlinuz.new" "$OUT/vmlinuz"
mv "$OUT/initramfs.gz.new" "$OUT/initramfs.gz"
echo "$kver" >"$OUT/kernel-version"
rm -rf "$OUT/kernel" "$root"
echo "vmtest: guest kernel $kver, modules: ${order[*]}"

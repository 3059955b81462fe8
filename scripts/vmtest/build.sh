#!/usr/bin/env bash
# Builds the vmtest guest under target/vm: a Debian 6.12 kernel (downloaded as a package and
# unpacked, not installed on the host) and an initramfs made here from busybox-static, the
# kernel modules the guest needs (9p for the host's root, virtio_net) and scripts/vmtest/init.
# Rebuilt only when missing or older than the init script. Needs: apt-get (the package lists),
# dpkg-deb, depmod (kmod), busybox-static, cpio, xz (make vmtest installs them when missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=target/vm
mkdir -p "$OUT/cache"
if [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initramfs.gz" ] && [ "$OUT/initramfs.gz" -nt scripts/vmtest/init ]; then
    exit 0
fi
newest() {
    apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb[0-9]+-amd64-unsigned$' |
        cut -d' ' -f1 | sort -V | tail -1
}
pkg=$(newest)
if [ -z "$pkg" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(newest)
fi
if [ -z "$pkg" ]; then
    echo "vmtest: no linux-image-6.12.*-amd64-unsigned package in the apt lists (run apt-get update; Debian bookworm-backports has it)" >&2
    exit 1
fi
deb=$(ls "$OUT"/cache/"$pkg"_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
    echo "vmtest: downloading $pkg"
    (cd "$OUT/cache" && apt-get download -q "$pkg" >/dev/null 2>&1) || {
        echo "vmtest: apt-get download $pkg failed (is a package mirror reachable?)" >&2
        exit 1
    }
    deb=$(ls "$OUT"/cache/"$pkg"_*.deb | head -1)
fi
rm -rf "$OUT/kernel" "$OUT/initramfs"
dpkg-deb -x "$deb" "$OUT/kernel"
kver=$(ls "$OUT/kernel/lib/modules" | head -1)
# The package ships no modules.dep (made at install time): make it for the unpacked tree.
depmod -b "$OUT/kernel" "$kver"
cp "$OUT/kernel/boot/vmlinuz-$kver" "$OUT/vmlinuz.new"

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
for m in netfs 9pnet 9pnet_virtio 9p failover net_failover virtio_net 8021q; do add "$m"; done
printf '%s\n' "${order[@]}" >"$root/lib/modules/order"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$OUT/initramfs.gz.new"
mv "$OUT/vmlinuz.new" "$OUT/vmlinuz"
mv "$OUT/initramfs.gz.new" "$OUT/initramfs.gz"
echo "$kver" >"$OUT/kernel-version"
rm -rf "$OUT/kernel" "$root"
echo "vmtest: guest kernel $kver, modules: ${order[*]}"

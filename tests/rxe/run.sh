#!/usr/bin/env bash
# Soft-RoCE (rdma_rxe) harness: boots a Debian 12 kernel in QEMU (TCG, no KVM,
# no RDMA hardware, no RDMA modules on the host), creates rxe0 on a dummy
# netdev inside the guest and runs `txbed devices` there against real verbs.
#
# Exit 0 only if the serial log contains "RXE-HARNESS: PASS".
# See docs/rxe.md.
#
# Environment:
#   TXBED_RXE_CACHE       download/extract cache (default target/rxe-cache)
#   TXBED_RXE_TARGET      cargo target dir for the verbs build (default target/rxe-target;
#                         separate from target/ so concurrent non-verbs builds do not
#                         overwrite the binary)
#   TXBED_RXE_BIN         a txbed binary already built with the "verbs" feature: used as is,
#                         nothing is built (CI passes the one its verbs tests built)
#   TXBED_RXE_KERNEL_PKG  kernel package (default: what linux-image-amd64 depends on)
#   TXBED_RXE_GUEST_COMMANDS  shell file copied into the guest and run after the device
#                         check (default tests/rxe/guest-commands.sh if it exists)
#   TXBED_RXE_TIMEOUT     seconds for the QEMU boot (default 300)
#   TXBED_RXE_MEM         guest memory in MiB (default 1024)
#   TXBED_RXE_SKIP_APT=1  do not apt-get anything (fail if something is missing)
#   TXBED_RXE_SELFTEST_NOLINK=1  negative self-test: no rxe0 in the guest, must exit 1
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

cache=${TXBED_RXE_CACHE:-target/rxe-cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
target_dir=${TXBED_RXE_TARGET:-target/rxe-target}
qemu_timeout=${TXBED_RXE_TIMEOUT:-300}
mem=${TXBED_RXE_MEM:-1024}
work="$cache/work"
log="$cache/serial.log"
t0=$(date +%s)

say() { echo "rxe-harness: $*" >&2; }
die() { say "error: $*"; exit 1; }

# ---------------------------------------------------------------- 1. packages
need_pkgs=(qemu-system-x86 busybox-static cpio gzip ibverbs-providers libibverbs1 iproute2 cmake libclang-dev)
missing=()
for p in "${need_pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    [[ ${TXBED_RXE_SKIP_APT:-0} == 1 ]] && die "missing packages: ${missing[*]}"
    say "installing: ${missing[*]}"
    sudo_=""; [[ $(id -u) == 0 ]] || sudo_=sudo
    export DEBIAN_FRONTEND=noninteractive
    timeout 600 $sudo_ apt-get install -y --no-install-recommends "${missing[@]}" >&2 || {
        timeout 300 $sudo_ apt-get update >&2
        timeout 600 $sudo_ apt-get install -y --no-install-recommends "${missing[@]}" >&2
    }
fi

# ---------------------------------------------------------------- 2. kernel
kpkg=${TXBED_RXE_KERNEL_PKG:-}
if [[ -z $kpkg ]]; then
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [[ -n $kpkg ]] || die "cannot resolve linux-image-amd64 (try apt-get update, or set TXBED_RXE_KERNEL_PKG)"
fi
kver_pkg=$(apt-cache policy "$kpkg" 2>/dev/null | awk '/Candidate:/{print $2}')
deb=$(ls "$cache"/"${kpkg}"_*.deb 2>/dev/null | head -1 || true)
if [[ -z $deb ]]; then
    say "downloading $kpkg ($kver_pkg)"
    # apt warns that _apt cannot write the cache dir when run as root; harmless.
    (cd "$cache" && timeout 600 apt-get download "$kpkg" >&2)
    deb=$(ls "$cache"/"${kpkg}"_*.deb | head -1)
fi
kdir="$cache/$(basename "$deb" .deb)"
if [[ ! -d $kdir/boot ]]; then
    say "extracting $(basename "$deb")"
    rm -rf "$kdir.tmp"
    mkdir -p "$kdir.tmp"
    dpkg-deb -x "$deb" "$kdir.tmp"
    mv "$kdir.tmp" "$kdir"
fi
vmlinuz=$(ls "$kdir"/boot/vmlinuz-* | head -1)
kconfig=$(ls "$kdir"/boot/config-* | head -1)
kuname=${vmlinuz##*/vmlinuz-}
moddir="$kdir/lib/modules/$kuname"
grep -q '^CONFIG_RDMA_RXE=[ym]' "$kconfig" || die "$kpkg has no CONFIG_RDMA_RXE"

# Module dependency closure from each module's .modinfo "depends=" (the .deb has no
# modules.dep; depmod/modinfo are not required on the host). Dependencies first.
declare -A modpath=() seen=()
order=()
modinfo_depends() { # file (.ko, .ko.xz, .ko.zst, .ko.gz)
    case $1 in
        *.xz) xz -dc "$1" ;; *.zst) zstd -dc "$1" ;; *.gz) gzip -dc "$1" ;; *) cat "$1" ;;
    esac | tr '\0' '\n' | grep -a '^depends=' | head -1 | cut -d= -f2 | tr ',' ' '
}
find_mod() {
    local name=$1 f
    f=$(find "$moddir/kernel" -name "$name.ko" -o -name "$name.ko.*" | head -1)
    [[ -n $f ]] || f=$(find "$moddir/kernel" -name "${name//_/-}.ko" -o -name "${name//_/-}.ko.*" | head -1)
    [[ -n $f ]] || die "module $name not found in $kpkg"
    echo "$f"
}
add_mod() {
    local name=$1 f d
    [[ -n ${seen[$name]:-} ]] && return 0
    seen[$name]=1
    f=$(find_mod "$name")
    for d in $(modinfo_depends "$f"); do add_mod "$d"; done
    modpath[$name]=$f
    order+=("$name")
}
# crc32_generic: rdma_rxe allocates the "crc32" shash for the ICRC.
for m in crc32_generic dummy udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe; do add_mod "$m"; done
say "kernel $kuname ($kpkg $kver_pkg); modules: ${order[*]}"

# ---------------------------------------------------------------- 3. txbed
if [[ -n ${TXBED_RXE_BIN:-} ]]; then
    txbed=$TXBED_RXE_BIN
    say "using $txbed (TXBED_RXE_BIN)"
else
    say "building txbed --features verbs (target dir $target_dir)"
    CARGO_TARGET_DIR=$target_dir timeout 1800 cargo build --release -p txbed --features verbs >&2
    txbed="$target_dir/release/txbed"
fi
[[ -x $txbed ]] || die "no $txbed"

# ---------------------------------------------------------------- 4. initramfs
root="$work/root"
rm -rf "$work"
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/sbin,etc,proc,sys,dev,tmp,run,mods,txbed}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

copy_file() { # host path -> same path in the initramfs (following symlinks)
    local src=$1 dst="$root$1"
    [[ -e $dst ]] && return 0
    mkdir -p "$(dirname "$dst")"
    cp -L "$src" "$dst"
}
copy_with_libs() { # ELF files; copies them and everything ldd resolves
    local f lib
    for f in "$@"; do
        copy_file "$f"
        for lib in $(ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'); do
            copy_file "$lib"
        done
    done
}

cp /bin/busybox "$root/usr/bin/busybox"
ln -s busybox "$root/usr/bin/sh" # for the #!/bin/sh of /init; the rest is installed at boot
if command -v strip >/dev/null; then
    strip -o "$root/txbed/txbed" "$txbed"
else
    cp "$txbed" "$root/txbed/txbed"
fi
for lib in $(ldd "$txbed" | awk '/=> \//{print $3} /^\t\/[^ ]+ \(/{print $1}'); do copy_file "$lib"; done
# txbed dlopen()s libibverbs.so.1 (rdma-mummy-sys), so ldd does not see it.
libdir=/usr/lib/x86_64-linux-gnu
providers=("$libdir"/libibverbs/librxe-rdmav*.so)
[[ -e ${providers[0]} ]] || die "no rxe provider in $libdir/libibverbs (ibverbs-providers)"
copy_with_libs "$libdir/libibverbs.so.1" "${providers[@]}"
[[ -e $libdir/librdmacm.so.1 ]] && copy_with_libs "$libdir/librdmacm.so.1"
mkdir -p "$root/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
# iproute2 rdma and ip (busybox ip has no "type dummy"-grade guarantees)
rdma_bin=$(command -v rdma || echo /usr/bin/rdma)
[[ -x $rdma_bin ]] || rdma_bin=/sbin/rdma
ip_bin=$(command -v ip || echo /usr/bin/ip)
copy_with_libs "$(readlink -f "$rdma_bin")" "$(readlink -f "$ip_bin")"
cp -L "$rdma_bin" "$root/usr/local/sbin/rdma"
cp -L "$ip_bin" "$root/usr/local/sbin/ip"
cp -r scenarios "$root/txbed/scenarios"
cp -r tests/rxe/scenarios "$root/txbed/scenarios/rxe"

: >"$root/mods/order"
for m in "${order[@]}"; do
    f=${modpath[$m]}
    case $f in
        *.xz) xz -dc "$f" >"$root/mods/$m.ko" ;;
        *.zst) zstd -dc "$f" >"$root/mods/$m.ko" ;;
        *.gz) gzip -dc "$f" >"$root/mods/$m.ko" ;;
        *) cp "$f" "$root/mods/$m.ko" ;;
    esac
    echo "$m" >>"$root/mods/order"
done

hook=${TXBED_RXE_GUEST_COMMANDS:-tests/rxe/guest-commands.sh}
if [[ -f $hook ]]; then
    say "guest hook: $hook"
    cp "$hook" "$root/txbed/guest-commands.sh"
fi

cat >"$root/init" <<'EOF'
#!/bin/sh
export PATH=/usr/local/sbin:/usr/bin:/usr/sbin
/usr/bin/busybox --install -s /usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm && mount -t tmpfs tmpfs /tmp
echo "RXE-HARNESS: guest up, kernel $(uname -r)"
fail=""
note() { fail="${fail:+$fail; }$1"; }
for m in $(cat /mods/order); do
    insmod /mods/$m.ko || note "insmod $m failed"
done
ip link set lo up
ip link add d0 type dummy || note "ip link add d0 failed"
ip addr add 10.0.0.1/24 dev d0
ip link set d0 up
if grep -q rxe_harness_nolink /proc/cmdline; then
    echo "RXE-HARNESS: self-test: not creating rxe0 (must FAIL)"
else
    rdma link add rxe0 type rxe netdev d0 || note "rdma link add failed"
fi
# GIDs are filled in asynchronously from the netdev's addresses; find the
# IPv4-mapped one for 10.0.0.1 (its index is what --gid-index wants).
i=0; gidx=""
while [ $i -lt 50 ] && [ -z "$gidx" ]; do
    for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
        [ "$(cat $g 2>/dev/null)" = 0000:0000:0000:0000:0000:ffff:0a00:0001 ] && gidx=${g##*/} && break
    done
    [ -n "$gidx" ] || sleep 0.1
    i=$((i + 1))
done
[ -d /sys/class/infiniband/rxe0 ] || note "/sys/class/infiniband/rxe0 missing"
if [ -n "$gidx" ]; then
    echo "RXE-HARNESS: gid-index-10.0.0.1=$gidx type=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$gidx 2>/dev/null)"
else
    note "no GID for 10.0.0.1 on rxe0 port 1"
fi
echo "RXE-HARNESS: rdma link:"
rdma link show
ls -l /dev/infiniband/ 2>&1
out=$(/txbed/txbed devices 2>&1); rc=$?
echo "RXE-HARNESS: devices-exit=$rc"
echo "RXE-HARNESS: txbed devices output begin"
echo "$out"
echo "RXE-HARNESS: txbed devices output end"
[ $rc -eq 0 ] || note "txbed devices exited $rc"
echo "$out" | grep -q '^rxe0' || note "txbed devices does not list rxe0"
if [ -f /txbed/guest-commands.sh ]; then
    echo "RXE-HARNESS: guest-commands begin"
    (cd /txbed && RXE_DEVICE=rxe0 RXE_IP=10.0.0.1 RXE_GID_INDEX=$gidx TXBED=/txbed/txbed \
        sh /txbed/guest-commands.sh); hrc=$?
    echo "RXE-HARNESS: guest-commands-exit=$hrc"
    [ $hrc -eq 0 ] || note "guest-commands.sh exited $hrc"
fi
if [ -z "$fail" ]; then
    echo "RXE-HARNESS: PASS"
else
    echo "RXE-HARNESS: FAIL $fail"
fi
sync
poweroff -f
EOF
chmod +x "$root/init"

initrd="$work/initrd.gz"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) >"$initrd"
say "initramfs $(du -h "$initrd" | cut -f1)"

# ---------------------------------------------------------------- 5. boot
# TXBED_RXE_SELFTEST_NOLINK=1: do not create rxe0 in the guest; the run must FAIL
# (checks that an empty device list is not reported as a pass).
selftest=""
[[ ${TXBED_RXE_SELFTEST_NOLINK:-0} == 1 ]] && selftest=" rxe_harness_nolink"
say "booting (tcg, timeout ${qemu_timeout}s); serial log $log"
tb=$(date +%s)
set +e
timeout "$qemu_timeout" qemu-system-x86_64 -accel tcg -m "$mem" -nographic -no-reboot -nic none \
    -kernel "$vmlinuz" -initrd "$initrd" -append "console=ttyS0 quiet panic=-1${selftest}" \
    </dev/null >"$log" 2>&1
qrc=$?
set -e
tr -d '\r' <"$log" >"$log.txt" && mv "$log.txt" "$log"
te=$(date +%s)
say "qemu exit $qrc after $((te - tb))s (whole script $((te - t0))s)"
sed -n '/RXE-HARNESS: guest up/,$p' "$log" | grep -v '^\[' || true
if grep -q '^RXE-HARNESS: PASS' "$log"; then
    say "PASS"
    exit 0
fi
((qrc == 124)) && say "qemu timed out after ${qemu_timeout}s"
say "FAIL; last lines of $log:"
tail -n 30 "$log" >&2
exit 1

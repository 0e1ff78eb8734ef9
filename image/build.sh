#!/bin/bash
# Build the flashable Tabcast appliance image (see image/README.md):
#   $OUT/tabcast-$VERSION-amd64.img      raw GPT disk, UEFI (systemd-boot)
#   $OUT/tabcast-$VERSION-amd64.img.zst  the same, zstd-compressed
#   $OUT/tabcast-$VERSION-amd64.tcupdate signed A/B update bundle of the same root
#                                        file system (`tabcast update apply`)
#   $OUT/tabcast-$VERSION-amd64.sha256   sha256sum of all three
# From Debian 12 packages only (mmdebstrap), with no loop devices and no
# mounts of the image: file systems are made from directories (mkfs.ext4 -d,
# mkfs.vfat + mtools), the GPT with sfdisk on a file, partitions written
# into it with dd conv=notrunc. Runs as root (mmdebstrap's root mode and
# file ownership in the root file system). Usage: `make image`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

VERSION=${VERSION:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)}
BIN=${BIN:-$repo/bin}
OUT=${OUT:-$repo/dist}
SUITE=${IMAGE_SUITE:-bookworm}
# Mirrors: unset, the ones this machine's apt uses (its sources), so the
# build goes where the machine is allowed to go.
host_uri() { # $1: a suffix the URI ends with (/debian or /debian-security)
	grep -hoE "https?://[^ ]+$1/?( |\$)" /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
		/etc/apt/sources.list.d/*.list 2>/dev/null | head -n 1 | tr -d ' ' | sed 's#/$##' || true
}
MIRROR=${IMAGE_MIRROR:-$(host_uri /debian)}
SECURITY_MIRROR=${IMAGE_SECURITY_MIRROR:-$(host_uri /debian-security)}
# Components: non-free for intel-media-va-driver-non-free (Intel VA-API
# *encoding*), non-free-firmware for the i915 GuC/HuC firmware it needs.
# IMAGE_NONFREE=0 builds from main only (mesa-va-drivers + the free Intel
# driver, which cannot encode on most Intel GPUs).
NONFREE=${IMAGE_NONFREE:-1}
ESP_MB=${IMAGE_ESP_MB:-256}
ROOT_MB=${IMAGE_ROOT_MB:-3072}
DATA_MB=${IMAGE_DATA_MB:-256}
# rootB: "empty" (an empty ext4 for the first update to write) or "copy"
# (a second copy of rootA with its own boot entry).
ROOT_B=${IMAGE_ROOT_B:-empty}
ZSTD_LEVEL=${IMAGE_ZSTD_LEVEL:-6}
CACHE=${IMAGE_APT_CACHE:-/var/cache/tabcast-image/apt}
# Update signing key (`tabcast update keygen`): its public half goes into the
# image as /usr/share/tabcast/update.pub and it signs the .tcupdate bundle.
# Unset: a DEVELOPMENT key, made once in $OUT/update-signing.key and reused.
# IMAGE_UPDATE_EXTRA_PUB: a file of more trusted public key lines (rotation).
UPDATE_KEY=${IMAGE_UPDATE_KEY:-}
UPDATE_EXTRA_PUB=${IMAGE_UPDATE_EXTRA_PUB:-}
# Timestamps and ids are fixed so that the same inputs give the same image.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 1700000000)}
export SOURCE_DATE_EPOCH

ver=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9._+-' '_')
name=tabcast-$ver-amd64
img=$OUT/$name.img

log() { printf '[image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'image: ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap root mode, root-owned files in the image)"
for b in tabcast capture-cdp capture-tab encoder-ffmpeg auth-local turnd; do
	[ -x "$BIN/$b" ] || die "$BIN/$b missing: run make build"
done
case $ROOT_B in empty|copy) ;; *) die "IMAGE_ROOT_B must be empty or copy" ;; esac

[ -n "$MIRROR" ] && [ -n "$SECURITY_MIRROR" ] || die "no Debian mirror in /etc/apt/sources*: set IMAGE_MIRROR and IMAGE_SECURITY_MIRROR"

# Host tools: `make image` installs them first (make image-deps).
for t in mmdebstrap sfdisk mkfs.ext4 mkfs.vfat mcopy zstd; do
	command -v "$t" >/dev/null 2>&1 || die "$t missing: run make image-deps"
done

# Deterministic GUIDs/UUIDs from a role name and the version (or, with a
# second argument such as "layout" in place of the version, the same in
# every version).
uuid() {
	local h
	h=$(printf 'tabcast-image:%s:%s' "${2-$ver}" "$1" | sha256sum | cut -c1-32)
	# RFC 4122 version 4 / variant 1 bits, so tools accept it as random-looking.
	printf '%s-%s-4%s-%x%s-%s\n' "${h:0:8}" "${h:8:4}" "${h:13:3}" \
		$(( (0x${h:16:1} & 0x3) | 0x8 )) "${h:17:3}" "${h:20:12}"
}
DISK_UUID=$(uuid disk)
# The root file system's fstab names the ESP by PARTUUID: it must be the same
# in every version, or a root file system installed by an A/B update would
# not find the ESP of a disk flashed with another version (and
# systemd-bless-boot could not mark its boot entry good).
ESP_UUID=$(uuid esp layout)
ROOTA_UUID=$(uuid root-a)
ROOTB_UUID=$(uuid root-b)
DATA_UUID=$(uuid data layout)
FS_ROOTA=$(uuid fs-root-a)
FS_ROOTB=$(uuid fs-root-b)
FS_DATA=$(uuid fs-data)
ESP_VOLID=$(printf '%s' "$ESP_UUID" | cut -c1-8)

work=$(mktemp -d "${TMPDIR:-/var/tmp}/tabcast-image.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
root=$work/root
esp=$work/esp
mkdir -p "$OUT" "$CACHE" "$esp"

start_time=$(date +%s)

# Update signing key and the public keys the image trusts.
if [ -z "$UPDATE_KEY" ]; then
	UPDATE_KEY=$OUT/update-signing.key
	if [ ! -f "$UPDATE_KEY" ]; then
		"$BIN/tabcast" update keygen --out "$work/devkey" --comment "tabcast DEVELOPMENT key" >/dev/null
		install -m 0600 "$work/devkey/update-signing.key" "$UPDATE_KEY"
	fi
	log "################################################################"
	log "WARNING: update bundles are signed with a DEVELOPMENT key:"
	log "  $UPDATE_KEY (not secret in any useful sense)."
	log "  Release images: IMAGE_UPDATE_KEY=/path/to/update-signing.key"
	log "################################################################"
fi
[ -r "$UPDATE_KEY" ] || die "IMAGE_UPDATE_KEY $UPDATE_KEY not readable"
"$BIN/tabcast" update pubkey --key "$UPDATE_KEY" >"$work/update.pub" ||
	die "IMAGE_UPDATE_KEY $UPDATE_KEY is not a signing key (tabcast update keygen)"
if [ -n "$UPDATE_EXTRA_PUB" ]; then
	cat "$UPDATE_EXTRA_PUB" >>"$work/update.pub"
fi
log "update key $(cut -d' ' -f2- "$work/update.pub" | head -n1); image trusts $(grep -c '^[A-Za-z0-9+/]' "$work/update.pub") key(s)"

components=main
[ "$NONFREE" = 1 ] && components=main,non-free-firmware,non-free
pkgs=(
	# boot and base system
	linux-image-amd64 initramfs-tools zstd systemd systemd-sysv systemd-resolved
	udev dbus netbase systemd-boot systemd-boot-efi kmod iproute2 fdisk e2fsprogs
	chrony nftables openssh-server ca-certificates
	# the appliance: Chromium, FFmpeg 5.1 runtime (encoder-ffmpeg links
	# libavdevice/libavfilter too), VA-API drivers, fonts for pages
	chromium fonts-liberation fonts-dejavu-core
	libavcodec59 libavformat59 libavutil57 libswscale6 libavdevice59 libavfilter8
	mesa-va-drivers
)
if [ "$NONFREE" = 1 ]; then
	pkgs+=(intel-media-va-driver-non-free firmware-misc-nonfree)
else
	pkgs+=(intel-media-va-driver)
fi
include=$(IFS=,; echo "${pkgs[*]}")

export IMAGE_REPO=$repo IMAGE_BIN=$BIN IMAGE_VERSION=$VERSION IMAGE_ESP_UUID=$ESP_UUID \
	IMAGE_DATA_UUID=$DATA_UUID IMAGE_UPDATE_PUB=$work/update.pub

log "mmdebstrap $SUITE ($components) -> rootfs"
# shellcheck disable=SC2016 # "$1" is expanded by mmdebstrap's hook shell
mmdebstrap --variant=minbase --mode=root --format=directory \
	--components="$components" --include="$include" \
	--aptopt='APT::Install-Recommends "false"' \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
	--skip=essential/unlink \
	--setup-hook='mkdir -p "$1"/var/cache/apt/archives/' \
	--setup-hook="sync-in $CACHE /var/cache/apt/archives/" \
	--customize-hook="sync-out /var/cache/apt/archives $CACHE" \
	--customize-hook="$here/customize.sh \"\$1\"" \
	"$SUITE" "$root" \
	"deb $MIRROR $SUITE ${components//,/ }" \
	"deb $MIRROR $SUITE-updates ${components//,/ }" \
	"deb $SECURITY_MIRROR $SUITE-security ${components//,/ }"
rm -f "$CACHE"/lock
find "$CACHE" -mindepth 1 -maxdepth 1 ! -name '*.deb' -exec rm -rf {} +

# Kernel and initrd to the ESP (systemd-boot reads them from there).
kver=$(find "$root/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n1)
if ! [ -f "$root/boot/vmlinuz-$kver" ] || ! [ -f "$root/boot/initrd.img-$kver" ]; then
	die "kernel $kver or its initrd missing in the rootfs"
fi
log "kernel $kver"

# The last console= is /dev/console (systemd status): serial, for headless
# debugging; tty1 shows kernel messages and the panel banner. panic=30: a
# kernel panic, or the initramfs not finding the root, reboots (and so burns
# a boot try) instead of hanging.
cmdline_common="rw quiet console=tty0 console=ttyS0,115200 systemd.show_status=auto panic=30"
slots=(a)
[ "$ROOT_B" = copy ] && slots+=(b)
mkdir -p "$esp/EFI/BOOT" "$esp/EFI/systemd" "$esp/loader/entries"
cp "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$esp/EFI/BOOT/BOOTX64.EFI"
cp "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$esp/EFI/systemd/systemd-bootx64.efi"
cat >"$esp/loader/loader.conf" <<EOF
# Tabcast appliance. Entries are tabcast-<generation>-<slot>[+tries].conf,
# all with sort-key tabcast and version <generation>-<version>: the highest
# generation boots. systemd-boot counts a new entry's tries down on each
# boot, systemd-bless-boot removes the counter once the system reached
# boot-complete.target (tabcast-boot-check.service: /readyz answered); an
# entry at +0 is "bad" and sorts last, so the other slot boots.
default tabcast-*
timeout 0
editor no
auto-entries no
auto-firmware no
console-mode keep
EOF
# Generation 0001 for slot A; a copy in slot B gets 0000 so that A boots
# first. `tabcast update apply` writes the next generation.
for s in "${slots[@]}"; do
	case $s in a) pu=$ROOTA_UUID gen=0001 ;; b) pu=$ROOTB_UUID gen=0000 ;; esac
	mkdir -p "$esp/tabcast/$s"
	cp "$root/boot/vmlinuz-$kver" "$esp/tabcast/$s/vmlinuz"
	cp "$root/boot/initrd.img-$kver" "$esp/tabcast/$s/initrd.img"
	S=${s^^}
	cat >"$esp/loader/entries/tabcast-$gen-$s+3.conf" <<EOF
title      Tabcast $VERSION (slot $S)
version    $gen-$ver
sort-key   tabcast
linux      /tabcast/$s/vmlinuz
initrd     /tabcast/$s/initrd.img
options    root=PARTUUID=$pu $cmdline_common tabcast.slot=$s
EOF
done
printf '%s\n' "$VERSION" >"$esp/tabcast/version"

# Fixed timestamps everywhere that goes into the image.
find "$root" "$esp" -newermt "@$SOURCE_DATE_EPOCH" -print0 |
	xargs -0r touch -h -d "@$SOURCE_DATE_EPOCH"

used_mb=$(du -sxm "$root" | cut -f1)
log "rootfs: ${used_mb} MiB used, rootA partition ${ROOT_MB} MiB"
[ $((used_mb * 115 / 100)) -lt "$ROOT_MB" ] || die "rootfs (${used_mb} MiB) does not fit IMAGE_ROOT_MB=$ROOT_MB with 15% margin"

export E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH
mkext4() { # file size_mb label fs_uuid [dir]
	rm -f "$1"; truncate -s "$2M" "$1"
	mkfs.ext4 -q -F -L "$3" -U "$4" -E "hash_seed=$4,root_owner=0:0" -T default \
		${5:+-d "$5"} "$1" >/dev/null
}
log "mkfs.ext4 rootA"
mkext4 "$work/root-a.ext4" "$ROOT_MB" tabcast-root-a "$FS_ROOTA" "$root"
if [ "$ROOT_B" = copy ]; then
	log "mkfs.ext4 rootB (copy)"
	mkext4 "$work/root-b.ext4" "$ROOT_MB" tabcast-root-b "$FS_ROOTB" "$root"
else
	mkext4 "$work/root-b.ext4" "$ROOT_MB" tabcast-root-b "$FS_ROOTB"
fi
# The A/B update bundle: rootA's file system, kernel and initrd, signed.
log "update bundle $name.tcupdate"
rm -f "$OUT/$name.tcupdate"
"$BIN/tabcast" update pack --key "$UPDATE_KEY" --version "$ver" --rootfs "$work/root-a.ext4" \
	--kernel "$root/boot/vmlinuz-$kver" --initrd "$root/boot/initrd.img-$kver" --out "$OUT/$name.tcupdate" >&2
"$BIN/tabcast" update verify --pubkey "$work/update.pub" "$OUT/$name.tcupdate" >&2
# Data: root directory owned by the tabcast user (uid from the image).
tuid=$(awk -F: '$1 == "tabcast" {print $3}' "$root/etc/passwd")
tgid=$(awk -F: '$1 == "tabcast" {print $4}' "$root/etc/passwd")
[ -n "$tuid" ] || die "no tabcast user in the image"
mkdir -m 0700 "$work/data"
touch -d "@$SOURCE_DATE_EPOCH" "$work/data"
rm -f "$work/data.ext4"; truncate -s "${DATA_MB}M" "$work/data.ext4"
mkfs.ext4 -q -F -L tabcast-data -U "$FS_DATA" -E "hash_seed=$FS_DATA,root_owner=$tuid:$tgid" \
	-T default -d "$work/data" "$work/data.ext4" >/dev/null

log "mkfs.vfat ESP"
truncate -s "${ESP_MB}M" "$work/esp.vfat"
mkfs.vfat -F 32 -n ESP -i "$ESP_VOLID" --invariant "$work/esp.vfat" >/dev/null
export MTOOLS_SKIP_CHECK=1
(cd "$esp" && find . -mindepth 1 -type d | sort | sed 's|^\./||' | while read -r d; do
	mmd -i "$work/esp.vfat" "::/$d"; done)
(cd "$esp" && find . -type f | sort | sed 's|^\./||' | while read -r f; do
	mcopy -m -i "$work/esp.vfat" "$f" "::/$f"; done)

# GPT on an image file; partitions at 1 MiB boundaries.
log "GPT + partitions -> $img"
s_esp=1
s_a=$((s_esp + ESP_MB))
s_b=$((s_a + ROOT_MB))
s_d=$((s_b + ROOT_MB))
total=$((s_d + DATA_MB + 1))
rm -f "$img" "$img.zst"
truncate -s "${total}M" "$img"
sfdisk --quiet --no-reread --no-tell-kernel "$img" <<EOF
label: gpt
label-id: $DISK_UUID
unit: sectors
first-lba: 2048
sector-size: 512

start=$((s_esp * 2048)), size=$((ESP_MB * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, uuid=$ESP_UUID, name="esp"
start=$((s_a * 2048)), size=$((ROOT_MB * 2048)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$ROOTA_UUID, name="tabcast-root-a"
start=$((s_b * 2048)), size=$((ROOT_MB * 2048)), type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=$ROOTB_UUID, name="tabcast-root-b"
start=$((s_d * 2048)), size=$((DATA_MB * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, uuid=$DATA_UUID, name="tabcast-data"
EOF
dd if="$work/esp.vfat" of="$img" bs=1M seek="$s_esp" conv=notrunc,sparse status=none
dd if="$work/root-a.ext4" of="$img" bs=1M seek="$s_a" conv=notrunc,sparse status=none
dd if="$work/root-b.ext4" of="$img" bs=1M seek="$s_b" conv=notrunc,sparse status=none
dd if="$work/data.ext4" of="$img" bs=1M seek="$s_d" conv=notrunc,sparse status=none
touch -d "@$SOURCE_DATE_EPOCH" "$img"

log "zstd -$ZSTD_LEVEL"
zstd -q -T0 "-$ZSTD_LEVEL" -f "$img" -o "$img.zst"
(cd "$OUT" && sha256sum "$name.img" "$name.img.zst" "$name.tcupdate" >"$name.sha256")

elapsed=$(($(date +%s) - start_time))
raw=$(stat -c %s "$img")
alloc=$(du -B1 "$img" | cut -f1)
comp=$(stat -c %s "$img.zst")
bundle=$(stat -c %s "$OUT/$name.tcupdate")
log "done in ${elapsed}s"
printf 'image: %s\n  raw %d MiB (allocated %d MiB), zst %d MiB, rootfs %d MiB, kernel %s\n  update bundle %s.tcupdate %d MiB\n  build time %ds\n' \
	"$img" $((raw >> 20)) $((alloc >> 20)) $((comp >> 20)) "$used_mb" "$kver" "$name" $((bundle >> 20)) "$elapsed"
printf '%s\n' "$name" >"$OUT/latest-image"

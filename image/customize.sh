#!/bin/bash
# mmdebstrap --customize-hook for the Tabcast image (called by build.sh with
# the root file system as $1 and IMAGE_* in the environment). Runs on the
# build host; commands that need the image's own tools use chroot.
set -euo pipefail
root=$1
here=$(cd "$(dirname "$0")" && pwd)
: "${IMAGE_BIN:?}" "${IMAGE_VERSION:?}" "${IMAGE_ESP_UUID:?}" "${IMAGE_DATA_UUID:?}" "${IMAGE_UPDATE_PUB:?}"
log() { printf '[customize] %s\n' "$*" >&2; }
in_root() { chroot "$root" "$@"; }

log "overlay image/rootfs"
# Root-owned regardless of who owns the work tree.
tar -C "$here/rootfs" --owner=0 --group=0 --mode='u+rwX,go+rX,go-w' -cf - . |
	tar -C "$root" -xf - --no-overwrite-dir

log "tabcast binaries -> /usr/lib/tabcast"
for b in tabcast capture-cdp capture-tab encoder-ffmpeg auth-local turnd; do
	install -m 0755 -o 0 -g 0 "$IMAGE_BIN/$b" "$root/usr/lib/tabcast/$b"
done
ln -sfn ../lib/tabcast/tabcast "$root/usr/bin/tabcast"
install -D -m 0644 "$here/README.md" "$root/usr/share/doc/tabcast/README.md"
printf '%s\n' "$IMAGE_VERSION" >"$root/usr/lib/tabcast/VERSION"
# The keys `tabcast update apply` trusts (build.sh: IMAGE_UPDATE_KEY).
install -D -m 0644 -o 0 -g 0 "$IMAGE_UPDATE_PUB" "$root/usr/share/tabcast/update.pub"

# Every shared library the binaries need is in the image.
if in_root ldd /usr/lib/tabcast/encoder-ffmpeg /usr/lib/tabcast/tabcast 2>&1 | grep 'not found'; then
	echo "customize: missing shared libraries (above)" >&2; exit 1
fi

log "users: tabcast (sysusers), root locked"
in_root systemd-sysusers
in_root usermod -p '!' root
in_root passwd -S root | grep -q ' L ' || { echo "customize: root not locked" >&2; exit 1; }
grep -q '^tabcast:' "$root/etc/passwd" || { echo "customize: no tabcast user" >&2; exit 1; }

log "config: /etc/tabcast"
chown -R 0:0 "$root/etc/tabcast"
in_root chown tabcast:tabcast /etc/tabcast
chmod 0750 "$root/etc/tabcast"
chmod 0644 "$root/etc/tabcast/config.yaml"
mkdir -p "$root/var/lib/tabcast" "$root/efi"
in_root chown tabcast:tabcast /var/lib/tabcast
chmod 0700 "$root/var/lib/tabcast" "$root/efi"
# The config parses and validates with the image's own binary.
in_root /usr/lib/tabcast/tabcast config check --config /etc/tabcast/config.yaml >/dev/null
# The config and local users live on the data partition, which updates never
# write: the image's /etc/tabcast becomes the defaults tabcast-etc.service
# seeds /var/lib/tabcast/etc from at first boot, and /etc/tabcast a link.
mkdir -p "$root/usr/share/tabcast"
mv "$root/etc/tabcast" "$root/usr/share/tabcast/etc-default"
ln -s /var/lib/tabcast/etc "$root/etc/tabcast"

log "fstab, hostname, machine-id"
cat >"$root/etc/fstab" <<EOF
# Tabcast appliance. / comes from the kernel command line (root=PARTUUID of
# slot A or B); systemd-remount-fs applies its options.
PARTUUID=$IMAGE_ESP_UUID   /efi   vfat   umask=0077,nofail,noexec,nosuid,nodev   0 2
# Data (PARTUUID $IMAGE_DATA_UUID): grown to the end of the disk by tabcast-firstboot.service, ext4
# grown online when mounted (x-systemd.growfs).
PARTLABEL=tabcast-data  /var/lib/tabcast  ext4  defaults,nofail,nodev,nosuid,x-systemd.growfs,x-systemd.requires=tabcast-firstboot.service  0 2
EOF
echo tabcast >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\ttabcast\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
# First boot: systemd makes a machine id (and runs ConditionFirstBoot units).
echo uninitialized >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
ln -sf /etc/machine-id "$root/var/lib/dbus/machine-id"
# Each appliance makes its own ssh host keys, once, on the data partition
# (tabcast firstboot host-keys: ssh.service drop-in, tabcast-system.service).
rm -f "$root"/etc/ssh/ssh_host_*
rm -f "$root/var/lib/systemd/random-seed" "$root/var/lib/systemd/credential.secret"

log "units"
in_root systemctl enable tabcast.service tabcast-etc.service tabcast-firstboot.service tabcast-console.service \
	tabcast-boot-check.service tabcast-system.service nftables.service systemd-networkd.service systemd-resolved.service chrony.service
in_root systemctl disable ssh.service
# No login prompt on tty1: the console banner owns it (root is locked).
in_root systemctl mask getty@tty1.service autovt@tty1.service
# systemd-networkd-wait-online: any one link is enough.
mkdir -p "$root/etc/systemd/system/systemd-networkd-wait-online.service.d"
cat >"$root/etc/systemd/system/systemd-networkd-wait-online.service.d/tabcast.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-networkd-wait-online --any --timeout=60
EOF
ln -sf ../run/systemd/resolve/stub-resolv.conf "$root/etc/resolv.conf"

# Unit files are well-formed (warnings only: no running systemd here).
in_root systemd-analyze verify --man=no /etc/systemd/system/tabcast.service \
	/etc/systemd/system/tabcast-firstboot.service /etc/systemd/system/tabcast-console.service \
	/etc/systemd/system/tabcast-boot-check.service /etc/systemd/system/tabcast-etc.service \
	/etc/systemd/system/tabcast-system.service \
	2>&1 | sed 's/^/[customize] systemd-analyze: /' >&2 || true

log "cleanup"
rm -rf "$root"/var/log/*.log "$root"/var/log/apt/* "$root"/var/cache/debconf/*-old \
	"$root"/var/lib/dpkg/*-old "$root"/var/cache/ldconfig/aux-cache

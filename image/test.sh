#!/bin/bash
# Check a built Tabcast image without booting it (`make image-test`):
# partition table (sfdisk -J), rootA and data contents (debugfs), the ESP
# (mtools), checksums. Reads the image in place through byte offsets: no
# loop devices, no mounts, no root needed. Each check prints one line;
# the first failure stops the script with FAIL.
set -eu
set -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
OUT=${OUT:-$repo/dist}
if [ -n "${IMAGE:-}" ]; then
	img=$IMAGE
else
	VERSION=${VERSION:-$(git -C "$repo" describe --tags --always --dirty 2>/dev/null || echo dev)}
	ver=$(printf '%s' "$VERSION" | tr -c 'A-Za-z0-9._+-' '_')
	img=$OUT/tabcast-$ver-amd64.img
	if [ ! -f "$img" ] && [ -f "$OUT/latest-image" ]; then
		img=$OUT/$(cat "$OUT/latest-image").img
	fi
fi
name=$(basename "$img" .img)
dir=$(dirname "$img")

pass=0
fail() { printf 'FAIL  %s\n' "$*" >&2; printf '%d passed, 1 failed\n' "$pass"; exit 1; }
ok() { pass=$((pass + 1)); printf 'ok    %s\n' "$*"; }

for t in sfdisk debugfs mdir mtype python3 sha256sum; do
	command -v "$t" >/dev/null 2>&1 || fail "tool $t missing (apt-get install fdisk e2fsprogs mtools python3)"
done
work=$(mktemp -d "${TMPDIR:-/tmp}/tabcast-image-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "image-test: $img"
[ -f "$img" ] || fail "image file $img missing (run make image)"
[ -f "$img.zst" ] || fail "compressed image $img.zst missing"
[ -f "$dir/$name.sha256" ] || fail "checksum file $dir/$name.sha256 missing"
[ -f "$dir/$name.tcupdate" ] || fail "update bundle $dir/$name.tcupdate missing"
ok "files: .img ($(($(stat -c %s "$img") >> 20)) MiB), .img.zst ($(($(stat -c %s "$img.zst") >> 20)) MiB), .tcupdate ($(($(stat -c %s "$dir/$name.tcupdate") >> 20)) MiB), .sha256"

(cd "$dir" && sha256sum --quiet -c "$name.sha256") || fail "sha256sum -c $name.sha256"
if ! { grep -q " $name.img\$" "$dir/$name.sha256" && grep -q " $name.img.zst\$" "$dir/$name.sha256" &&
	grep -q " $name.tcupdate\$" "$dir/$name.sha256"; }; then
	fail "$name.sha256 does not list .img, .img.zst and .tcupdate"
fi
ok "sha256: .img, .img.zst, .tcupdate match $name.sha256"

# --- partition table -------------------------------------------------------
sfdisk -J "$img" >"$work/pt.json" || fail "sfdisk -J cannot read a partition table"
python3 - "$work/pt.json" >"$work/parts" <<'EOF' || fail "partition table: $(cat "$work/parts")"
import json, sys
t = json.load(open(sys.argv[1]))["partitiontable"]
want = [("esp", "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"),
        ("tabcast-root-a", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"),
        ("tabcast-root-b", "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"),
        ("tabcast-data", "0FC63DAF-8483-4772-8E79-3D69D8477DE4")]
ps = t.get("partitions", [])
if t.get("label") != "gpt": print("label is %s, not gpt" % t.get("label")); sys.exit(1)
if len(ps) != 4: print("%d partitions, want 4" % len(ps)); sys.exit(1)
for i, (p, (nm, ty)) in enumerate(zip(ps, want), 1):
    if p.get("name") != nm or p["type"].upper() != ty:
        print("partition %d is %s/%s, want %s/%s" % (i, p.get("name"), p["type"], nm, ty)); sys.exit(1)
    if p["start"] % 2048:
        print("partition %d not 1 MiB aligned" % i); sys.exit(1)
# name start size uuid, one line each
for p in ps:
    print(p["name"], p["start"], p["size"], p["uuid"].lower())
EOF
esp_mb=$(awk '$1 == "esp" {print int($3 / 2048)}' "$work/parts")
[ "$esp_mb" -ge 200 ] || fail "ESP is $esp_mb MiB, want ~256"
ok "sfdisk -J: gpt, 4 partitions esp(EFI System, ${esp_mb} MiB) tabcast-root-a/b(root x86-64) tabcast-data(linux)"

off() { echo $(( $(awk -v n="$1" '$1 == n {print $2}' "$work/parts") * 512 )); }
puuid() { awk -v n="$1" '$1 == n {print $4}' "$work/parts"; }
ROOTA="$img?offset=$(off tabcast-root-a)"
DATA="$img?offset=$(off tabcast-data)"
ESP="$img@@$(off esp)"
export MTOOLS_SKIP_CHECK=1

# --- rootA (debugfs reads the file system at its byte offset) ---------------
dbg() { debugfs -R "$2" "$1" 2>"$work/dbg.err"; }
dbg "$ROOTA" stats >"$work/stats" || fail "debugfs cannot open rootA: $(cat "$work/dbg.err")"
grep -q '^Filesystem volume name:   tabcast-root-a' "$work/stats" || fail "rootA has no ext4 label tabcast-root-a"
ok "rootA: ext4 tabcast-root-a ($(awk -F': *' '/^Block count/ {c=$2} /^Free blocks/ {f=$2} /^Block size/ {b=$2} END {printf "%d MiB used", (c-f)*b/1048576}' "$work/stats"))"

# exists PATH TYPE  (TYPE: regular | symlink | directory)
exists() {
	dbg "$ROOTA" "stat $1" >"$work/stat" || true
	grep -q "Type: $2" "$work/stat" || fail "rootA: $1 missing or not $2 $(head -c 200 "$work/dbg.err")"
}
exists /usr/bin/tabcast symlink
dbg "$ROOTA" "stat /usr/bin/tabcast" >"$work/o" || true
grep -q 'Fast link dest: "../lib/tabcast/tabcast"' "$work/o" ||
	fail "rootA: /usr/bin/tabcast does not point to ../lib/tabcast/tabcast"
ok "rootA: /usr/bin/tabcast -> ../lib/tabcast/tabcast"
for b in tabcast capture-cdp capture-tab encoder-ffmpeg auth-local turnd; do
	exists "/usr/lib/tabcast/$b" regular
	dbg "$ROOTA" "stat /usr/lib/tabcast/$b" >"$work/o" || true
	grep -q 'Mode:  0755' "$work/o" || fail "rootA: /usr/lib/tabcast/$b not mode 0755"
done
ok "rootA: /usr/lib/tabcast/{tabcast,capture-cdp,capture-tab,encoder-ffmpeg,auth-local,turnd} (0755)"
exists /usr/lib/chromium/chromium regular
ok "rootA: /usr/lib/chromium/chromium"
exists /etc/systemd/system/tabcast.service regular
dbg "$ROOTA" "cat /etc/systemd/system/tabcast.service" >"$work/unit"
for l in 'User=tabcast' 'ProtectSystem=strict' 'ProtectHome=yes' 'PrivateTmp=yes' 'NoNewPrivileges=yes' \
	'AmbientCapabilities=CAP_NET_BIND_SERVICE' 'CapabilityBoundingSet=CAP_NET_BIND_SERVICE' \
	'ReadWritePaths=/var/lib/tabcast /etc/tabcast' 'Restart=on-failure' 'StateDirectory=tabcast' \
	'Type=notify' 'WatchdogSec=30s' 'Delegate=yes' 'ExecStartPre=+/usr/lib/tabcast/libexec/browser-wall'; do
	grep -qx "$l" "$work/unit" || fail "tabcast.service lacks $l"
done
if grep '^ExecStart' "$work/unit" | grep -q -- '--no-sandbox'; then fail "tabcast.service passes --no-sandbox"; fi
ok "rootA: /etc/systemd/system/tabcast.service (tabcast user, hardening, notify + watchdog, the browser wall, no --no-sandbox)"
exists /usr/lib/tabcast/libexec/browser-wall regular
dbg "$ROOTA" "cat /usr/lib/tabcast/libexec/browser-wall" >"$work/o"
grep -q 'socket cgroupv2 level 3 "$unit/browser" ip daddr != 127.0.0.0/8' "$work/o" ||
	fail "rootA: browser-wall does not limit the browser cgroup to loopback"
ok "rootA: /usr/lib/tabcast/libexec/browser-wall (the browser cgroup reaches loopback only)"
for u in tabcast tabcast-console; do
	exists "/etc/systemd/system/multi-user.target.wants/$u.service" symlink
done
exists /etc/systemd/system/local-fs.target.wants/tabcast-firstboot.service symlink
exists /etc/systemd/system/sysinit.target.wants/nftables.service symlink
exists /etc/systemd/system/boot-complete.target.requires/tabcast-boot-check.service symlink
dbg "$ROOTA" "cat /etc/systemd/system/tabcast-boot-check.service" >"$work/unit"
for l in 'Before=boot-complete.target' 'FailureAction=reboot' 'RequiredBy=boot-complete.target'; do
	grep -qx "$l" "$work/unit" || fail "tabcast-boot-check.service lacks $l"
done
grep -q '^ExecStart=/usr/lib/tabcast/tabcast update wait-ready --timeout 5m ' "$work/unit" ||
	fail "tabcast-boot-check.service does not run tabcast update wait-ready --timeout 5m"
ok "rootA: enabled tabcast, tabcast-console, tabcast-firstboot, nftables, tabcast-boot-check (boot-complete.target, FailureAction=reboot)"
exists /usr/share/tabcast/update.pub regular
dbg "$ROOTA" "cat /usr/share/tabcast/update.pub" >"$work/update.pub"
grep -q '^[A-Za-z0-9+/]\{43\}= ' "$work/update.pub" || fail "rootA: /usr/share/tabcast/update.pub holds no ed25519 key"
tc=${BIN:-$repo/bin}/tabcast
if [ -x "$tc" ]; then
	"$tc" update verify --pubkey "$work/update.pub" "$dir/$name.tcupdate" >"$work/o" 2>&1 ||
		fail "$name.tcupdate does not verify with the image's update.pub: $(cat "$work/o")"
	ok "rootA: /usr/share/tabcast/update.pub ($(grep -c '^[A-Za-z0-9+/]' "$work/update.pub") key(s)); $name.tcupdate verifies with it"
else
	ok "rootA: /usr/share/tabcast/update.pub ($(grep -c '^[A-Za-z0-9+/]' "$work/update.pub") key(s)); bundle not verified ($tc missing)"
fi
dbg "$ROOTA" "stat /etc/systemd/system/multi-user.target.wants/ssh.service" >"$work/stat" || true
grep -q 'Type:' "$work/stat" && fail "rootA: ssh.service is enabled"
dbg "$ROOTA" "ls /etc/ssh" >"$work/o" || true
if grep -q 'ssh_host_' "$work/o"; then fail "rootA: ssh host keys baked into the image"; fi
ok "rootA: ssh.service disabled, no ssh host keys"
exists /etc/systemd/system/tabcast-system.service regular
exists /etc/systemd/system/multi-user.target.wants/tabcast-system.service symlink
dbg "$ROOTA" "cat /etc/systemd/system/tabcast-system.service" >"$work/unit"
grep -q '^ExecStart=-/usr/lib/tabcast/tabcast firstboot apply --esp /efi ' "$work/unit" ||
	fail "tabcast-system.service does not run '-tabcast firstboot apply --esp /efi' (must never fail the boot)"
for u in tabcast-etc.service efi.mount; do
	grep -q "^After=.*$u" "$work/unit" || fail "tabcast-system.service not After=$u"
done
for u in systemd-networkd.service chrony.service ssh.service tabcast.service; do
	grep -q "^Before=.*$u" "$work/unit" || fail "tabcast-system.service not Before=$u"
done
for l in 'Type=oneshot' 'StandardOutput=journal+console' 'StandardError=journal+console' 'RequiresMountsFor=/var/lib/tabcast'; do
	grep -qx "$l" "$work/unit" || fail "tabcast-system.service lacks $l"
done
ok "rootA: tabcast-system.service enabled (tabcast-firstboot.yaml on the ESP; never fails the boot; before networkd, chrony, ssh, tabcast)"
exists /etc/ssh/sshd_config.d/tabcast.conf regular
dbg "$ROOTA" "cat /etc/ssh/sshd_config.d/tabcast.conf" >"$work/o"
for l in 'PasswordAuthentication no' 'PermitRootLogin prohibit-password' 'KbdInteractiveAuthentication no' \
	'HostKey /etc/ssh/tabcast/ssh_host_ed25519_key' 'AuthorizedKeysFile /etc/ssh/tabcast/authorized_keys'; do
	grep -qx "$l" "$work/o" || fail "sshd_config.d/tabcast.conf lacks $l"
done
dbg "$ROOTA" "cat /etc/ssh/sshd_config" >"$work/o2"
grep -q '^Include /etc/ssh/sshd_config.d/\*.conf' "$work/o2" || fail "sshd_config does not include sshd_config.d"
dbg "$ROOTA" "cat /etc/systemd/system/ssh.service.d/tabcast.conf" >"$work/o"
grep -qx 'ExecStartPre=/usr/lib/tabcast/tabcast firstboot host-keys --state /var/lib/tabcast/etc --root /' "$work/o" ||
	fail "ssh.service drop-in does not make the host keys with tabcast firstboot host-keys"
grep -q 'ssh-keygen -A' "$work/o" && fail "ssh.service drop-in still runs ssh-keygen -A (keys in /etc/ssh are lost on update)"
grep -q 'nft add element inet tabcast tcp_open { 22 }' "$work/o" || fail "ssh.service drop-in does not open 22/tcp"
ok "rootA: sshd key-only for root, host keys and authorized_keys from /etc/ssh/tabcast (data partition copies)"
dbg "$ROOTA" "cat /etc/shadow" >"$work/shadow"
awk -F: '$1 == "root" {print $2}' "$work/shadow" >"$work/rootpw"
case $(cat "$work/rootpw") in '!'*|'*'*) ;; *) fail "rootA: root password is not locked" ;; esac
awk -F: '$2 !~ /^[!*]/ {print $1}' "$work/shadow" >"$work/pw"
[ -s "$work/pw" ] && fail "rootA: accounts with a password: $(tr '\n' ' ' <"$work/pw")"
dbg "$ROOTA" "cat /etc/passwd" >"$work/passwd"
grep -q '^tabcast:' "$work/passwd" || fail "rootA: no tabcast user"
ok "rootA: root locked, no account has a password, tabcast user exists"
exists /etc/tabcast symlink
dbg "$ROOTA" "stat /etc/tabcast" >"$work/o" || true
grep -q 'Fast link dest: "/var/lib/tabcast/etc"' "$work/o" ||
	fail "rootA: /etc/tabcast does not point to /var/lib/tabcast/etc (the data partition)"
exists /usr/lib/tabcast/libexec/seed-etc regular
exists /etc/systemd/system/multi-user.target.wants/tabcast-etc.service symlink
ok "rootA: /etc/tabcast -> /var/lib/tabcast/etc, seeded by tabcast-etc.service"
dbg "$ROOTA" "cat /usr/share/tabcast/etc-default/config.yaml" >"$work/cfg"
if ! { grep -q 'listen: ":443"' "$work/cfg" && grep -q 'redirectListen: ":80"' "$work/cfg" &&
	grep -q 'dir: /usr/lib/tabcast' "$work/cfg"; }; then
	fail "rootA: the default config.yaml lacks listen :443 / redirectListen :80 / plugins.dir"
fi
ok "rootA: /usr/share/tabcast/etc-default/config.yaml (server.listen :443, redirectListen :80, plugins.dir)"
dbg "$ROOTA" "cat /etc/nftables.conf" >"$work/nft"
if ! { grep -q 'elements = { 80, 443, 8443, 3478 }' "$work/nft" && grep -q 'elements = { 8443, 3478 }' "$work/nft" &&
	grep -q 'policy drop' "$work/nft"; }; then
	fail "rootA: /etc/nftables.conf does not open exactly 80,443,8443,3478/tcp and 8443,3478/udp"
fi
ok "rootA: nftables: policy drop; tcp 80,443,8443,3478; udp 8443,3478"
dbg "$ROOTA" "cat /etc/fstab" >"$work/o"
grep -q "^PARTLABEL=tabcast-data */var/lib/tabcast" "$work/o" ||
	fail "rootA: fstab does not mount the data partition at /var/lib/tabcast"
ok "rootA: fstab mounts PARTLABEL=tabcast-data at /var/lib/tabcast"
dbg "$ROOTA" "ls /usr/lib/x86_64-linux-gnu" >"$work/libs"
for p in libavcodec.so.59 libavformat.so.59 libavutil.so.57 libswscale.so.6; do
	grep -q "$p" "$work/libs" || fail "rootA: $p missing"
done
dbg "$ROOTA" "ls /usr/lib/x86_64-linux-gnu/dri" >"$work/dri"
grep -q 'radeonsi_drv_video.so' "$work/dri" || fail "rootA: mesa-va-drivers missing"
if grep -q 'iHD_drv_video.so' "$work/dri"; then vaapi="mesa + intel iHD"; else vaapi="mesa only"; fi
ok "rootA: FFmpeg 5.1 libs; VA-API drivers: $vaapi"

# --- data ------------------------------------------------------------------
dbg "$DATA" stats >"$work/o" || true
grep -q '^Filesystem volume name:   tabcast-data' "$work/o" || fail "data: no ext4 tabcast-data"
dbg "$DATA" "stat /" >"$work/o" || true
tuid=$(awk -F: '$1 == "tabcast" {print $3}' "$work/passwd")
grep -q "User: *$tuid " "$work/o" || fail "data: root directory not owned by tabcast (uid $tuid)"
ok "data: ext4 tabcast-data, root directory owned by tabcast (uid $tuid)"

# --- ESP ---------------------------------------------------------------------
mdir -b -/ -i "$ESP" :: >"$work/esp" 2>"$work/mt.err" || fail "mdir cannot read the ESP: $(cat "$work/mt.err")"
for f in ::/EFI/BOOT/BOOTX64.EFI ::/EFI/systemd/systemd-bootx64.efi ::/loader/loader.conf \
	::/tabcast/a/vmlinuz ::/tabcast/a/initrd.img; do
	grep -qix "$f" "$work/esp" || fail "ESP: $f missing"
done
ok "ESP: EFI/BOOT/BOOTX64.EFI, EFI/systemd/systemd-bootx64.efi, loader/loader.conf, tabcast/a/{vmlinuz,initrd.img}"
entry=tabcast-0001-a+3.conf
grep -qix "::/loader/entries/$entry" "$work/esp" || fail "ESP: loader/entries/$entry missing"
mtype -i "$ESP" "::/loader/entries/$entry" >"$work/entry"
grep -q "root=PARTUUID=$(puuid tabcast-root-a) " "$work/entry" || fail "$entry does not boot rootA's PARTUUID"
grep -q ' tabcast.slot=a' "$work/entry" || fail "$entry lacks tabcast.slot=a"
grep -q '^sort-key *tabcast *$' "$work/entry" || fail "$entry: sort-key is not tabcast"
grep -q '^version *0001-' "$work/entry" || fail "$entry: version is not 0001-<version>"
for k in linux initrd; do
	f=$(awk -v k="$k" '$1 == k {print $2}' "$work/entry")
	grep -qix "::$f" "$work/esp" || fail "$entry: $k $f not on the ESP"
done
grep -i '^::/loader/entries/.*\.conf$' "$work/esp" >"$work/entries" || true
grep -iv '/tabcast-[0-9]\{4\}-[ab]+3\.conf$' "$work/entries" >"$work/o" || true
[ -s "$work/o" ] && fail "ESP: unexpected loader entries: $(tr '\n' ' ' <"$work/o")"
ok "ESP: loader/entries/$entry (generation 0001, boot counting, sort-key tabcast), root=PARTUUID of rootA, kernel+initrd present"
mtype -i "$ESP" ::/loader/loader.conf >"$work/o"
grep -q '^editor no' "$work/o" || fail "loader.conf: editor not disabled"
grep -q '^default tabcast-\*' "$work/o" || fail "loader.conf: default is not tabcast-*"
ok "ESP: loader.conf: default tabcast-*, editor no"
dbg "$ROOTA" "cat /etc/fstab" >"$work/o"
grep -q "^PARTUUID=$(puuid esp) */efi " "$work/o" || fail "rootA: fstab does not mount the ESP's PARTUUID at /efi"
ok "rootA: fstab mounts the ESP (PARTUUID $(puuid esp), the same in every version) at /efi"
mcopy -n -i "$ESP" ::/EFI/BOOT/BOOTX64.EFI "$work/boot.efi"
[ "$(head -c 2 "$work/boot.efi")" = MZ ] || fail "BOOTX64.EFI is not a PE binary"
ok "ESP: BOOTX64.EFI is a PE/COFF binary"

printf '%d passed, 0 failed\n' "$pass"

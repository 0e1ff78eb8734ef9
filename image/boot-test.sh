#!/bin/bash
# Boot the built Tabcast image in QEMU (TCG, no KVM needed) with OVMF (UEFI)
# and wait until the appliance answers https://127.0.0.1:$PORT/readyz.
# Not run by `make image-test` (slow under TCG). The image itself is not
# modified: the VM writes to a qcow2 overlay, made larger than the image so
# the data partition's first-boot growth is exercised too.
#
#   image/boot-test.sh [IMAGE]      env: PORT (default 18443), TIMEOUT (s, default 1200),
#                                   MEM (MiB, default 4096), KEEP=1 keeps the VM running
#
# Guest networking is QEMU user mode with restrict=on: the guest reaches
# nothing outside the VM; only host port $PORT is forwarded to its 443.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
img=${1:-}
if [ -z "$img" ]; then
	[ -f "$repo/dist/latest-image" ] || { echo "boot-test: no image (make image)" >&2; exit 1; }
	img=$repo/dist/$(cat "$repo/dist/latest-image").img
fi
PORT=${PORT:-18443}
TIMEOUT=${TIMEOUT:-1200}
MEM=${MEM:-4096}
OVMF_CODE=${OVMF_CODE:-/usr/share/OVMF/OVMF_CODE_4M.fd}
OVMF_VARS=${OVMF_VARS:-/usr/share/OVMF/OVMF_VARS_4M.fd}

for t in qemu-system-x86_64 qemu-img curl; do
	command -v "$t" >/dev/null || { echo "boot-test: $t missing (apt-get install qemu-system-x86 qemu-utils ovmf curl)" >&2; exit 1; }
done
[ -f "$OVMF_CODE" ] || { echo "boot-test: $OVMF_CODE missing (apt-get install ovmf)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/tabcast-boot-test.XXXXXX")
qpid=""
cleanup() {
	if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then kill "$qpid"; wait "$qpid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cp "$OVMF_VARS" "$work/vars.fd"
size=$(stat -c %s "$img")
qemu-img create -q -f qcow2 -F raw -b "$(readlink -f "$img")" "$work/disk.qcow2" $((size + (2 << 30)))
log=$work/serial.log
: >"$log"

start=$(date +%s)
qemu-system-x86_64 -accel tcg -machine q35 -cpu max -smp 2 -m "$MEM" \
	-drive if=pflash,format=raw,readonly=on,file="$OVMF_CODE" \
	-drive if=pflash,format=raw,file="$work/vars.fd" \
	-drive if=virtio,format=qcow2,cache=unsafe,file="$work/disk.qcow2" \
	-netdev "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:$PORT-:443" \
	-device virtio-net-pci,netdev=n0 \
	-display none -monitor none -serial "file:$log" &
qpid=$!
echo "boot-test: qemu pid $qpid, serial log $log, https://127.0.0.1:$PORT/readyz (timeout ${TIMEOUT}s)"

milestone() { # print the first time a pattern shows up in the serial log
	local pat=$1 label=$2 var=$3
	if [ -z "${!var:-}" ] && grep -qa "$pat" "$log"; then
		printf -v "$var" '%s' 1
		echo "boot-test: +$(($(date +%s) - start))s $label"
	fi
}
ready=""
while :; do
	now=$(date +%s)
	kill -0 "$qpid" 2>/dev/null || { echo "boot-test: qemu exited" >&2; tail -n 40 "$log" >&2; exit 1; }
	milestone 'Linux version' 'kernel started' m_kernel
	milestone 'Reached target.*Local File Systems' 'local file systems (data partition mounted)' m_fs
	milestone 'tabcast-firstboot\|grow-data' 'first-boot growth ran' m_grow
	milestone 'Started.*Tabcast appliance' 'tabcast.service started' m_svc
	milestone 'Reached target.*Multi-User' 'multi-user.target' m_mu
	code=$(curl -sk -o /dev/null -w '%{http_code}' --max-time 5 "https://127.0.0.1:$PORT/readyz" || true)
	if [ "$code" = 200 ]; then ready=$((now - start)); break; fi
	if [ $((now - start)) -ge "$TIMEOUT" ]; then
		echo "boot-test: FAIL: /readyz not 200 after ${TIMEOUT}s (last: $code)" >&2
		tail -n 60 "$log" >&2
		exit 1
	fi
	sleep 5
done
echo "boot-test: PASS: /readyz 200 after ${ready}s"
curl -sk --max-time 5 "https://127.0.0.1:$PORT/healthz" && echo
code=$(curl -sk -o /dev/null -w '%{http_code}' --max-time 5 "https://127.0.0.1:$PORT/")
echo "boot-test: panel / answered HTTP $code"
if [ "${KEEP:-0}" = 1 ]; then
	echo "boot-test: KEEP=1: VM left running (pid $qpid); Ctrl-C ends it"
	wait "$qpid"
fi

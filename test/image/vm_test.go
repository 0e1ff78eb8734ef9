//go:build imagetest

// Package image boots the built appliance image in QEMU and tests it as IT
// would use it: first boot, the console, the panel with live video from a
// browser on another machine (this host), and A/B updates with rollback.
// Built only with -tags imagetest: `make image-test` builds the image first
// (the tests need dist/latest-image) and runs them.
package image

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// vm is one QEMU guest booted from a copy of the image.
type vm struct {
	*qemuGuest
	t       *testing.T
	dir     string
	disk    string
	key     string // ssh private key (root, via the first-boot file)
	panel   int    // host port forwarded to the guest's 443
	ssh     int    // host port forwarded to the guest's 22
	bundles map[string]string
}

const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// mediaPort is the appliance's webrtc.udpPort (UDP and ICE-TCP): the
	// guest advertises 127.0.0.1 with it, so the host forwards the same
	// number.
	mediaPort = 8443
)

// imagePath is the image `make image` built last.
func imagePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TABCAST_IMAGE"); p != "" {
		return p
	}
	root := repoRoot(t)
	name, err := os.ReadFile(filepath.Join(root, "dist", "latest-image"))
	if err != nil {
		t.Fatalf("no built image (make image): %v", err)
	}
	return filepath.Join(root, "dist", strings.TrimSpace(string(name))+".img")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("repo root: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// partition is one GPT entry of the image.
type partition struct {
	Name        string
	Start, Size int64 // bytes
}

func partitions(t *testing.T, img string) map[string]partition {
	t.Helper()
	var pt struct {
		PartitionTable struct {
			Partitions []struct {
				Start, Size int64
				Name        string
			}
		}
	}
	if err := json.Unmarshal([]byte(run(t, "sfdisk", "-J", img)), &pt); err != nil {
		t.Fatalf("sfdisk -J: %v", err)
	}
	out := map[string]partition{}
	for _, p := range pt.PartitionTable.Partitions {
		out[p.Name] = partition{p.Name, p.Start * 512, p.Size * 512}
	}
	return out
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newVM copies the image (sparse) into a work dir, puts firstboot (the
// unattended set-up file) on its ESP, grows the disk by 2 GiB (the data
// partition's first-boot growth) and attaches each bundle as a read-only
// virtio disk (/dev/disk/by-id/virtio-<name>). It does not boot it.
func newVM(t *testing.T, img, firstboot string, bundles map[string]string) *vm {
	t.Helper()
	dir := t.TempDir()
	accel, forced, err := chooseAccel()
	if err != nil {
		t.Fatal(err)
	}
	v := &vm{t: t, dir: dir, disk: filepath.Join(dir, "disk.img"),
		panel: freePort(t), ssh: freePort(t), bundles: bundles}
	v.qemuGuest = &qemuGuest{t: t, serial: filepath.Join(dir, "serial.log"), stderr: filepath.Join(dir, "qemu.stderr.log"),
		args: v.qemuArgs, accel: accel, forced: forced}
	run(t, "cp", "--sparse=always", img, v.disk)
	esp := partitions(t, v.disk)["esp"]
	fb := filepath.Join(dir, "tabcast-firstboot.yaml")
	if err := os.WriteFile(fb, []byte(firstboot), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("mcopy", "-o", "-i", fmt.Sprintf("%s@@%d", v.disk, esp.Start), fb, "::tabcast-firstboot.yaml")
	cmd.Env = append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcopy the first-boot file: %v\n%s", err, out)
	}
	st, err := os.Stat(v.disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(v.disk, st.Size()+2<<30); err != nil {
		t.Fatal(err)
	}
	run(t, "cp", ovmfVars, filepath.Join(dir, "vars.fd"))
	// Cleanups run last first: QEMU stops, then its logs are kept if the
	// test failed, then the directory goes.
	root := repoRoot(t)
	t.Cleanup(func() { v.keepLogsOnFailure(root) })
	t.Cleanup(v.stop)
	return v
}

// start boots the guest (again, after a reboot ended QEMU: -no-reboot
// turns every guest reboot into an exit, so each boot is seen), falling
// back to TCG when KVM cannot run it.
func (v *vm) start() {
	v.t.Helper()
	if err := v.qemuGuest.start(); err != nil {
		v.t.Fatal(err)
	}
}

// qemuArgs are QEMU's arguments for this guest under an accelerator.
func (v *vm) qemuArgs(accel string) []string {
	cpu := "max"
	if accel == accelKVM {
		cpu = "host"
	}
	args := []string{"-accel", accel, "-machine", "q35", "-cpu", cpu, "-smp", "2", "-m", "4096", "-no-reboot",
		"-drive", "if=pflash,format=raw,readonly=on,file=" + ovmfCode,
		"-drive", "if=pflash,format=raw,file=" + filepath.Join(v.dir, "vars.fd"),
		// The system disk boots first (bootindex), before the bundles'.
		"-drive", "if=none,id=sys,format=raw,cache=unsafe,file=" + v.disk, "-device", "virtio-blk-pci,drive=sys,bootindex=0",
		// restrict=on: the guest reaches nothing outside the VM; only
		// these host ports reach it.
		"-netdev", fmt.Sprintf("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:443,hostfwd=tcp:127.0.0.1:%d-:22,hostfwd=udp:127.0.0.1:%d-:%d,hostfwd=tcp:127.0.0.1:%d-:%d",
			v.panel, v.ssh, mediaPort, mediaPort, mediaPort, mediaPort),
		"-device", "virtio-net-pci,netdev=n0",
		// A GPU the guest's kernel drives (virtio-gpu, 2D: no video
		// encoder behind it), so the encoder self-test meets a real DRM
		// device rather than none.
		"-vga", "virtio",
		"-display", "none", "-monitor", "none", "-chardev", "file,id=s0,path=" + v.serial + ",append=on", "-serial", "chardev:s0",
	}
	i := 0
	for name, path := range v.bundles {
		i++
		args = append(args, "-drive", fmt.Sprintf("if=none,id=b%d,format=raw,readonly=on,file=%s", i, path),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=b%d,serial=%s", i, name))
	}
	return args
}

func (v *vm) console() string {
	b, _ := os.ReadFile(v.serial)
	return string(b)
}

// consoleTail is the end of the serial log without terminal control codes.
func (v *vm) consoleTail(n int) string {
	s := ansi.ReplaceAllString(v.console(), "")
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// sshArgs run as root over the forwarded port with the test's key; the
// guest's host key is new on every test.
func (v *vm) sshArgs() []string {
	return []string{"-i", v.key, "-p", strconv.Itoa(v.ssh), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", "-o", "BatchMode=yes", "root@127.0.0.1"}
}

// sh runs a shell command in the guest.
func (v *vm) sh(ctx context.Context, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "ssh", append(v.sshArgs(), script)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (v *vm) mustSh(ctx context.Context, script string) string {
	v.t.Helper()
	out, err := v.sh(ctx, script)
	if err != nil {
		v.t.Fatalf("guest: %s: %v\n%s", script, err, out)
	}
	return out
}

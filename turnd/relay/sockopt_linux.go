package relay

import (
	"syscall"
)

// setBuffers sets SO_RCVBUF and SO_SNDBUF to size, with the *FORCE variants
// first (they pass net.core.[rw]mem_max when the process has CAP_NET_ADMIN).
func setBuffers(fd uintptr, size int) {
	if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, size) != nil {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
	}
	if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, size) != nil {
		_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, size)
	}
}

// getBuffers returns the effective sizes (the kernel doubles what was
// asked for, for its bookkeeping, and caps it at the sysctl maximum).
func getBuffers(fd uintptr) (rcv, snd int) {
	rcv, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
	snd, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	return rcv, snd
}

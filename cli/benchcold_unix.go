//go:build unix

package cli

import (
	"os"
	"runtime"
	"syscall"
)

// maxRSS returns an exited child's peak resident set in bytes (getrusage:
// kilobytes on Linux, bytes on macOS), 0 where unknown: where /proc gives
// none (pollHWM), on macOS.
func maxRSS(ps *os.ProcessState) int64 {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) * 1024
}

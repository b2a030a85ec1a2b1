//go:build unix

package model_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time this process has used so far, all
// threads together: on a machine shared with other work, a forward pass's CPU time
// per call is steadier than its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build !linux

package cli

import "time"

// threadCPU is the CPU time of the calling OS thread, which only Linux
// reports here (ok false elsewhere).
func threadCPU() (time.Duration, bool) { return 0, false }

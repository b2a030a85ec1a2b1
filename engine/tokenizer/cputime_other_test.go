//go:build !linux

package tokenizer

import "time"

var clockStart = time.Now()

// threadCPU returns the wall-clock time since the tests started, where the
// thread's CPU time is not wired up.
func threadCPU() time.Duration { return time.Since(clockStart) }

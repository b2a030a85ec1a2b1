//go:build !unix

package quant

import "time"

// processCPU is unknown here: benchmarks leave out the CPU-time metric.
func processCPU() time.Duration { return 0 }

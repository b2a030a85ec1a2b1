//go:build !unix

package model_test

import "time"

// processCPU is unknown here: benchmarks leave out the CPU-time metric.
func processCPU() time.Duration { return 0 }

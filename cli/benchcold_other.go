//go:build !unix

package cli

import "os"

// maxRSS is unknown here (0).
func maxRSS(ps *os.ProcessState) int64 { return 0 }

//go:build !((linux || freebsd || openbsd || netbsd) && !android)

package app

// checkDisplay: macOS and Windows always have a display.
func checkDisplay() error { return nil }

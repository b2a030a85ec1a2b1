//go:build !((linux || freebsd || openbsd || netbsd) && !android)

// This file holds the display check where there is no X11 to look for: none.

package app

// checkDisplay: macOS and Windows always have a display.
func checkDisplay() error { return nil }

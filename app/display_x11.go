//go:build (linux || freebsd || openbsd || netbsd) && !android

// This file holds the X11 display check made before the window opens.

package app

import (
	"errors"
	"os"
)

// checkDisplay reports a missing display before the window system is
// started (GLFW panics without one).
func checkDisplay() error {
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return errors.New("no display to open the window on (neither DISPLAY nor WAYLAND_DISPLAY is set); run kvscope in a desktop session, or use a headless command such as 'kvscope run' (see 'kvscope help')")
	}
	return nil
}

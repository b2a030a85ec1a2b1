//go:build (linux || freebsd || openbsd || netbsd) && !android

package app

import (
	"strings"
	"testing"
)

func TestCheckDisplay(t *testing.T) {
	t.Setenv("DISPLAY", "")
	t.Setenv("WAYLAND_DISPLAY", "")
	if err := checkDisplay(); err == nil || !strings.Contains(err.Error(), "kvscope run") {
		t.Errorf("without a display: %v", err)
	}
	t.Setenv("DISPLAY", ":99")
	if err := checkDisplay(); err != nil {
		t.Errorf("with DISPLAY set: %v", err)
	}
}

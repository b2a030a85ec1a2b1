package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// APIKeyEnv names the environment variable that holds the API key when
// none is given (kvscope serve's --api-key, the app's key field).
const APIKeyEnv = "KVSCOPE_API_KEY"

// ErrNeedsKey is CheckAddr's error for an address that other machines can
// reach, given without an API key.
var ErrNeedsKey = errors.New("reachable from other machines: an API key is needed")

// CheckAddr refuses an address that is not host:port, and one other than
// loopback (127.0.0.0/8, ::1, localhost) when hasKey is false, with an
// error wrapping ErrNeedsKey. It is the rule for every way of starting a
// server: kvscope serve and the app's toggle.
func CheckAddr(addr string, hasKey bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port, such as 127.0.0.1:8080", addr)
	}
	if hasKey || IsLoopback(host) {
		return nil
	}
	return fmt.Errorf("%s is %w", addr, ErrNeedsKey)
}

// IsLoopback reports whether host names only this machine.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

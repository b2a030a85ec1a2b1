package server

import (
	"errors"
	"testing"
)

// TestCheckAddr: loopback needs no key, anything else does, and an address
// that is not host:port is refused.
func TestCheckAddr(t *testing.T) {
	for _, a := range []string{"127.0.0.1:8080", "127.0.0.2:0", "[::1]:1", "localhost:1", "LocalHost:0"} {
		if err := CheckAddr(a, false); err != nil {
			t.Errorf("%s without a key: %v", a, err)
		}
	}
	for _, a := range []string{"0.0.0.0:0", ":8080", "[::]:1", "example.com:80", "192.168.1.2:8080"} {
		if err := CheckAddr(a, false); !errors.Is(err, ErrNeedsKey) {
			t.Errorf("%s without a key: %v, want ErrNeedsKey", a, err)
		}
		if err := CheckAddr(a, true); err != nil {
			t.Errorf("%s with a key: %v", a, err)
		}
	}
	for _, a := range []string{"nonsense", "127.0.0.1", ""} {
		if err := CheckAddr(a, true); err == nil || errors.Is(err, ErrNeedsKey) {
			t.Errorf("%q: %v, want not host:port", a, err)
		}
	}
}

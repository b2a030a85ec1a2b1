package engine

import "testing"

func TestCountAndPlural(t *testing.T) {
	for _, c := range []struct {
		n          int
		noun, want string
	}{
		{1, "token", "1 token"}, {0, "token", "0 tokens"}, {2, "block", "2 blocks"}, {1536, "block", "1,536 blocks"},
		{1, "reply", "1 reply"}, {3, "reply", "3 replies"}, {2, "day", "2 days"}, {2, "prefix", "2 prefixes"},
	} {
		if got := Count(c.n, c.noun); got != c.want {
			t.Errorf("Count(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
	if got := Bytes(262144); got != "256 KiB" {
		t.Errorf("Bytes(262144) = %q", got)
	}
	if got := describeChange(DefaultConfig(), func() Config { c := DefaultConfig(); c.Cache.Budget = 256 << 10; return c }()); got != "budget auto → 256 KiB" {
		t.Errorf("describeChange: %q", got)
	}
}

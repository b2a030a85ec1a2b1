package cli

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestHeadDimTable checks bench cache's table of bits and capacity by head
// dim: a column pair for each of head dims 8, 32, 64 and 128, a row per
// precision and block size, and issue 23's capacities (int8 and fp8 at
// least 1.9× f16, int4 3.2×) at every head dim of 32 and up.
func TestHeadDimTable(t *testing.T) {
	var out bytes.Buffer
	if err := headDimTable(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+2*7+1 {
		t.Fatalf("%d lines, want a title, a header, 14 rows and the models' line:\n%s", len(lines), out.String())
	}

	for _, d := range []string{"D=8", "D=32", "D=64", "D=128"} {
		if !strings.Contains(lines[1], d+" K/V bits") || !strings.Contains(lines[1], d+" capacity") {
			t.Errorf("header %q lacks %s's columns", lines[1], d)
		}
	}
	mins := map[string]float64{"int8": 1.9, "fp8": 1.9, "int4": 3.2, "f16": 1, "q8_0": 1.88}
	seen := 0
	for _, l := range lines[2:16] {
		f := strings.Fields(l)
		if len(f) != 2+2*4 {
			t.Fatalf("row %q has %d fields, want 10", l, len(f))
		}
		min, ok := mins[f[0]]
		if !ok {
			continue
		}
		seen++
		for i, d := range []int{8, 32, 64, 128} {
			bits := strings.Split(f[2+2*i], "/")
			if len(bits) != 2 {
				t.Fatalf("row %q: %q is not K/V bits", l, f[2+2*i])
			}
			c, err := strconv.ParseFloat(strings.TrimSuffix(f[3+2*i], "×"), 64)
			if err != nil {
				t.Fatalf("row %q: capacity %q: %v", l, f[3+2*i], err)
			}
			if d >= 32 && c < min {
				t.Errorf("%s at block %s, head dim %d: %.2f× f16, want at least %.2f×", f[0], f[1], d, c, min)
			}
		}
	}
	if seen != 10 {
		t.Errorf("%d rows of f16, q8_0, int8, fp8 and int4, want 10", seen)
	}
}

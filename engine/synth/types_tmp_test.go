package synth_test

import (
	"os"
	"testing"
	"time"

	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

func TestTmpTypes(t *testing.T) {
	if os.Getenv("SYNTH_TYPES") == "" {
		t.Skip()
	}
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.F16} {
		s := synth.TinyLlama
		s.Type = typ
		t0 := time.Now()
		b, err := synth.Generate(s, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes in %v", typ, len(b), time.Since(t0))
	}
}

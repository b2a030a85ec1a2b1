package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

// TestGenModelRoundTrip writes the small preset in each type through the
// command and loads the file with model.Load: the shape must be the
// preset's and the tensors of the type asked for (Q4_K_M: llama.cpp's
// mix).
func TestGenModelRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := synth.Small
	for _, tc := range []struct {
		typ   string
		types map[string]quant.Type
	}{
		{"F16", map[string]quant.Type{"token_embd.weight": quant.F16, "output.weight": quant.F16, "blk.1.ffn_down.weight": quant.F16}},
		{"q8_0", map[string]quant.Type{"token_embd.weight": quant.Q8_0, "output.weight": quant.Q8_0, "blk.0.attn_q.weight": quant.Q8_0}},
		{"Q4_0", map[string]quant.Type{"output.weight": quant.Q4_0, "blk.1.attn_v.weight": quant.Q4_0}},
		{"Q4_K_M", map[string]quant.Type{"token_embd.weight": quant.Q4_K, "output.weight": quant.Q6_K, "blk.0.attn_v.weight": quant.Q4_K,
			"blk.1.attn_v.weight": quant.Q6_K, "blk.1.ffn_down.weight": quant.Q6_K, "blk.1.ffn_up.weight": quant.Q4_K}},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			path := filepath.Join(dir, tc.typ+".gguf")
			code, out, stderr := run(t, "gen-model", "--preset", "small", "--type", tc.typ, "-o", path)
			if code != 0 || !strings.HasPrefix(out, "wrote "+path) {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			m, err := model.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			c := m.Config
			if c.Arch != "llama" || c.Dim != s.Dim || c.Layers != s.Layers || c.Heads != s.Heads || c.KVHeads != s.KVHeads ||
				c.FFDim != s.FFDim || c.Vocab != s.Vocab || c.Context != s.Context {
				t.Errorf("config %+v, want the shape %+v", c, s)
			}
			if m.Params() != s.Params() {
				t.Errorf("%d weights, want %d", m.Params(), s.Params())
			}
			for name, want := range tc.types {
				if ti, ok := m.File.Tensor(name); !ok || ti.Type != want {
					t.Errorf("%s: %v, want %v", name, ti.Type, want)
				}
			}
		})
	}
}

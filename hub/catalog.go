package hub

import (
	"slices"

	"kvscope/engine/model"
)

// Entry is one model of the Catalog.
type Entry struct {
	ID    string // short name: kvscope pull ID
	Title string // for people
	Ref   Ref
	Arch  string // the file's general.architecture
	Quant string // its quantization
	// Size is the file's size in bytes, as published; approximate (to a
	// few MB) where SizeApprox says so. Download checks the real size and
	// hash the hub reports, whatever this says.
	Size       int64
	SizeApprox bool
	// Checked says where the repository and file names (and the size)
	// were confirmed.
	Checked string
}

// Runnable reports whether kvscope runs the entry's architecture today
// (engine/model.Supported).
func (e Entry) Runnable() bool { return slices.Contains(model.Supported, e.Arch) }

// Catalog lists small chat models, smallest first within what kvscope
// runs, then those whose architecture it does not run yet. The names were
// checked against public code that downloads these exact files from the
// hub (no request to the hub could be made from here); each entry says
// where.
var Catalog = []Entry{
	{
		ID: "smollm2-360m", Title: "SmolLM2 360M Instruct",
		Ref:  Ref{Repo: "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF", File: "smollm2-360m-instruct-q8_0.gguf"},
		Arch: "llama", Quant: "Q8_0", Size: 386404992,
		Checked: "HuggingFaceTB's own GGUF repository; name and byte size as listed in wllama-based apps' model tables and several Android apps' download URLs",
	},
	{
		ID: "qwen2.5-0.5b", Title: "Qwen2.5 0.5B Instruct",
		Ref:  Ref{Repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", File: "qwen2.5-0.5b-instruct-q8_0.gguf"},
		Arch: "qwen2", Quant: "Q8_0", Size: 675710816,
		Checked: "Qwen's official GGUF repository (its model card lists q2_K ... q8_0, lower-case file names); byte size as listed in a wllama app's model table",
	},
	{
		ID: "llama-3.2-1b", Title: "Llama 3.2 1B Instruct",
		Ref:  Ref{Repo: "hugging-quants/Llama-3.2-1B-Instruct-Q4_K_M-GGUF", File: "llama-3.2-1b-instruct-q4_k_m.gguf"},
		Arch: "llama", Quant: "Q4_K_M", Size: 807690656,
		Checked: "Hugging Face's hugging-quants conversion (ungated, unlike meta-llama's); name and byte size as listed in a wllama app's model table. bartowski/Llama-3.2-1B-Instruct-GGUF with Llama-3.2-1B-Instruct-Q8_0.gguf is another, seen in several download scripts",
	},
	{
		ID: "qwen3-0.6b", Title: "Qwen3 0.6B",
		Ref:  Ref{Repo: "Qwen/Qwen3-0.6B-GGUF", File: "Qwen3-0.6B-Q8_0.gguf"},
		Arch: "qwen3", Quant: "Q8_0", Size: 639446688,
		Checked: "Qwen's official GGUF repository; name, byte size and sha256 9465e63a22add5354d9bb4b99e90117043c7124007664907259bd16d043bb031 as listed in two apps' model catalogs (unsloth/Qwen3-0.6B-GGUF has the same file name)",
	},
	{
		ID: "gemma-3-1b", Title: "Gemma 3 1B IT",
		Ref:  Ref{Repo: "ggml-org/gemma-3-1b-it-GGUF", File: "gemma-3-1b-it-Q4_K_M.gguf"},
		Arch: "gemma3", Quant: "Q4_K_M", Size: 806 << 20, SizeApprox: true,
		Checked: "ggml-org's (llama.cpp's) ungated conversion, as used in several apps' download URLs; the size is unsloth's same-named file's published 806 MB, not confirmed to the byte for ggml-org's",
	},
	{
		ID: "phi-3.5-mini", Title: "Phi-3.5 mini Instruct",
		Ref:  Ref{Repo: "bartowski/Phi-3.5-mini-instruct-GGUF", File: "Phi-3.5-mini-instruct-Q4_K_M.gguf"},
		Arch: "phi3", Quant: "Q4_K_M", Size: 2393232416,
		Checked: "bartowski's conversion; name and byte size as listed in a Mac app's model table, the name also in several download scripts",
	},
}

// Find returns the catalog entry with the ID id.
func Find(id string) (Entry, bool) {
	for _, e := range Catalog {
		if e.ID == id {
			return e, true
		}
	}
	return Entry{}, false
}

package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

// hfByteLevelJSON is a tiny GPT-2-style tokenizer.json: byte-alphabet
// tokens ("Ġ" a space, "Ċ" a newline, "Ã©" the bytes of "é"), merges as
// strings or as pairs, a special and a non-special added token beyond the
// vocab.
func hfByteLevelJSON(pairs bool) string {
	merges := `["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "Ã ©"]`
	if pairs {
		merges = `[["h","e"],["l","l"],["he","ll"],["hell","o"],["Ġ","w"],["o","r"],["Ġw","or"],["Ġwor","l"],["Ġworl","d"],["Ã","©"]]`
	}
	return `{
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 22, "content": "<|im_start|>", "special": true},
    {"id": 23, "content": "<tool>", "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false,
    "vocab": {"<|endoftext|>": 0, "h": 1, "e": 2, "l": 3, "o": 4, "Ġ": 5, "w": 6, "r": 7, "d": 8, "Ċ": 9, "Ã": 10, "©": 11,
      "he": 12, "ll": 13, "hell": 14, "hello": 15, "Ġw": 16, "or": 17, "Ġwor": 18, "Ġworl": 19, "Ġworld": 20, "Ã©": 21},
    "merges": ` + merges + `}
}`
}

// hfMetaspaceJSON is a tiny Llama-2-style tokenizer.json: "▁" for spaces,
// <0xNN> byte-fallback tokens, <s> put first by the post-processor, and
// the decoder given (a Replace / ByteFallback / Fuse / Strip sequence or a
// Metaspace decoder).
func hfMetaspaceJSON(decoder string) string {
	return `{
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}
  ],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
  "pre_tokenizer": null,
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": ` + decoder + `,
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5, "▁": 6, "H": 7, "i": 8, "t": 9, "h": 10, "e": 11, "r": 12,
      "▁H": 13, "▁Hi": 14, "▁t": 15, "he": 16, "re": 17, "▁the": 18, "▁there": 19, "her": 20},
    "merges": ["▁ H", "▁H i", "▁ t", "h e", "r e", "▁t he", "▁the re", "he r"]}
}`
}

const (
	hfLlamaDecoder = `{"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}`
	hfMetaDecoder  = `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false}`
	hfMetaOld      = `{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}`
	hfMetaNever    = `{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": false}`
)

func mustHF(t *testing.T, js string) *Tokenizer {
	t.Helper()
	tok, err := FromHFJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// ids maps token texts to their ids in tok.
func idsOf(t *testing.T, tok *Tokenizer, texts ...string) []int {
	t.Helper()
	var ids []int
	for _, s := range texts {
		id, ok := tok.ID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		ids = append(ids, id)
	}
	return ids
}

func TestHFJSONDecode(t *testing.T) {
	type tc struct {
		ids  []string // token texts
		want string
	}
	byteLevel := []tc{
		{[]string{"hello"}, "hello"},
		{[]string{"hello", "Ġworld"}, "hello world"},
		{[]string{"<|endoftext|>", "hello", "<|endoftext|>"}, "hello"},
		{[]string{"<|im_start|>", "h", "e", "ll", "o"}, "hello"},
		{[]string{"<tool>", "Ġw"}, "<tool> w"},
		{[]string{"Ã©", "Ċ", "Ġ"}, "é\n "},
		{[]string{"Ã", "©"}, "é"},
		{[]string{"Ġworld"}, " world"},
	}
	spm := []tc{
		{[]string{"<s>", "▁Hi"}, "Hi"},
		{[]string{"▁Hi"}, "Hi"},
		{[]string{"<s>", "▁Hi", "▁there", "<0x0A>"}, "Hi there\n"},
		{[]string{"▁Hi", "<0xC3>", "<0xA9>", "</s>"}, "Hié"},
		{[]string{"▁t", "<unk>", "her", "e"}, "there"},
		// As llama.cpp, the space strip is spent on the first id, even when
		// it shows nothing.
		{[]string{"<unk>", "▁t", "her", "e"}, " there"},
		{[]string{"h", "e", "▁", "▁t"}, "he  t"},
	}
	files := []struct {
		name, json, model string
		cases             []tc
	}{
		{"bytelevel strings", hfByteLevelJSON(false), ModelBPE, byteLevel},
		{"bytelevel pairs", hfByteLevelJSON(true), ModelBPE, byteLevel},
		{"llama sequence", hfMetaspaceJSON(hfLlamaDecoder), ModelSPM, spm},
		{"metaspace", hfMetaspaceJSON(hfMetaDecoder), ModelSPM, spm},
		{"metaspace old", hfMetaspaceJSON(hfMetaOld), ModelSPM, spm},
		{"metaspace never", hfMetaspaceJSON(hfMetaNever), ModelSPM, []tc{{[]string{"<s>", "▁Hi"}, " Hi"}, {[]string{"▁Hi", "▁t"}, " Hi t"}}},
	}
	for _, f := range files {
		t.Run(f.name, func(t *testing.T) {
			tok := mustHF(t, f.json)
			if tok.Model() != f.model {
				t.Fatalf("model %q, want %q", tok.Model(), f.model)
			}
			for _, c := range f.cases {
				ids := idsOf(t, tok, c.ids...)
				if got := tok.Decode(ids); got != c.want {
					t.Errorf("Decode(%q) = %q, want %q", c.ids, got, c.want)
				}
			}
		})
	}
}

// The special ids, types and sizes a tokenizer.json gives.
func TestHFJSONSpecials(t *testing.T) {
	b := mustHF(t, hfByteLevelJSON(false))
	if b.Size() != 24 || b.Pre() != "gpt-2" || b.EOS() != 0 || b.BOS() != -1 || b.AddBOS() {
		t.Errorf("byte-level: size %d, pre %q, EOS %d, BOS %d, AddBOS %v", b.Size(), b.Pre(), b.EOS(), b.BOS(), b.AddBOS())
	}
	for id, want := range map[int]int{0: TypeControl, 22: TypeControl, 23: TypeUserDefined, 5: TypeNormal} {
		if got := b.Type(id); got != want {
			t.Errorf("byte-level: type of %d (%q) is %d, want %d", id, b.Token(id), got, want)
		}
	}
	// Ids 0..23 are all named; a file that skips some gets unused slots.
	holey := strings.Replace(hfByteLevelJSON(false), `"id": 22`, `"id": 30`, 1)
	h := mustHF(t, holey)
	if h.Size() != 31 || h.Type(25) != TypeUnused || h.Decode([]int{25, 15}) != "hello" {
		t.Errorf("with a hole: size %d, type of 25 %d, Decode %q", h.Size(), h.Type(25), h.Decode([]int{25, 15}))
	}

	s := mustHF(t, hfMetaspaceJSON(hfLlamaDecoder))
	if s.BOS() != 1 || !s.AddBOS() || s.EOS() != 2 || s.UNK() != 0 {
		t.Errorf("metaspace: BOS %d (add %v), EOS %d, UNK %d", s.BOS(), s.AddBOS(), s.EOS(), s.UNK())
	}
	for id, want := range map[int]int{0: TypeUnknown, 1: TypeControl, 3: TypeByte, 5: TypeByte, 6: TypeNormal} {
		if got := s.Type(id); got != want {
			t.Errorf("metaspace: type of %d (%q) is %d, want %d", id, s.Token(id), got, want)
		}
	}
}

// Encode runs the package's BPE and SPM code on a tokenizer.json's
// vocabulary and merges.
func TestHFJSONEncode(t *testing.T) {
	cases := []struct {
		json, text string
		addSpecial bool
		want       []string
	}{
		{hfByteLevelJSON(false), "hello world", false, []string{"hello", "Ġworld"}},
		{hfByteLevelJSON(true), "hello world", false, []string{"hello", "Ġworld"}},
		{hfByteLevelJSON(false), "hell\né", false, []string{"hell", "Ċ", "Ã©"}},
		{hfMetaspaceJSON(hfLlamaDecoder), "Hi there", true, []string{"<s>", "▁Hi", "▁there"}},
		{hfMetaspaceJSON(hfLlamaDecoder), "her", false, []string{"▁", "her"}},
		{hfMetaspaceJSON(hfLlamaDecoder), "é\n", true, []string{"<s>", "▁", "<0xC3>", "<0xA9>", "<0x0A>"}},
	}
	for _, c := range cases {
		tok := mustHF(t, c.json)
		want := idsOf(t, tok, c.want...)
		got := tok.Encode(c.text, c.addSpecial, false)
		if !slices.Equal(got, want) {
			t.Errorf("%s: Encode(%q) = %v, want %v (%q)", tok.Model(), c.text, got, want, c.want)
		}
		if d := tok.Decode(got); d != c.text {
			t.Errorf("%s: Decode(Encode(%q)) = %q", tok.Model(), c.text, d)
		}
	}
}

// Malformed files give an error that says what is wrong, never a panic,
// and so does every truncation of a good file.
func TestHFJSONMalformed(t *testing.T) {
	good := hfByteLevelJSON(false)
	meta := hfMetaspaceJSON(hfLlamaDecoder)
	cases := []struct{ name, json, want string }{
		{"not json", "GGUF\x03\x00", "not a tokenizer.json"},
		{"empty object", "{}", "has no model"},
		{"unigram", `{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}, "decoder": {"type": "Metaspace"}}`, `model type "Unigram"`},
		{"wordpiece decoder", strings.Replace(good, `"decoder": {"type": "ByteLevel"`, `"decoder": {"type": "WordPiece"`, 1), `decoder "WordPiece"`},
		{"no decoder", `{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}`, "no ByteLevel or Metaspace decoder"},
		{"vocab a list", `{"model": {"type": "BPE", "vocab": ["a"]}, "decoder": {"type": "ByteLevel"}}`, "model.vocab is not a map"},
		{"no vocab", `{"model": {"type": "BPE"}, "decoder": {"type": "ByteLevel"}}`, "has no vocab"},
		{"empty vocab", `{"model": {"type": "BPE", "vocab": {}}, "decoder": {"type": "ByteLevel"}}`, "has no tokens"},
		{"negative id", strings.Replace(good, `"h": 1,`, `"h": -1,`, 1), `"h" has id -1`},
		{"huge id", strings.Replace(good, `"h": 1,`, `"h": 4000000000,`, 1), `"h" has id 4000000000`},
		{"id twice", strings.Replace(good, `"e": 2,`, `"e": 1,`, 1), `id 1 is both`},
		{"added id clash", strings.Replace(good, `"id": 23`, `"id": 1`, 1), `id 1 is both`},
		{"added without id", strings.Replace(good, `"id": 23, `, ``, 1), "added_tokens[2] has no id"},
		{"bad merges", strings.Replace(good, `"merges": [`, `"merges": [1, `, 1), "model.merges is neither"},
		{"three-part merge", hfByteLevelJSON(true)[:strings.Index(hfByteLevelJSON(true), `"merges"`)] + `"merges": [["a", "b", "c"]]}}`, "merge 0 has 3 parts"},
		{"other replace", strings.Replace(meta, `"content": " ", "start"`, `"content": "x", "start"`, 1), ""},
		{"replace to x", strings.Replace(meta, `{"String": "▁"}, "content": " "`, `{"String": "▁"}, "content": "x"`, 1), `Replace decoder "▁" → "x"`},
		{"other metaspace", strings.Replace(hfMetaspaceJSON(hfMetaDecoder), `"replacement": "▁"`, `"replacement": "_"`, 1), `replacement "_"`},
		{"mixed", strings.Replace(meta, `{"type": "Fuse"}`, `{"type": "ByteLevel"}`, 1), "mixes ByteLevel and Metaspace"},
		{"deep", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), "not a tokenizer.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromHFJSON([]byte(c.json))
			if c.want == "" {
				if err != nil {
					t.Errorf("want no error, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	for _, js := range []string{good, meta} {
		for n := range len(js) {
			if _, err := FromHFJSON([]byte(js[:n])); err == nil {
				t.Errorf("a file cut at %d bytes gave no error", n)
			}
		}
	}
}

// LoadHFJSON refuses a file too large to be a tokenizer.json before it
// reads it, and what is not a file.
func TestLoadHFJSONLimits(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "tokenizer.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: the size is there, the bytes are not.
	if err := f.Truncate(MaxHFJSONSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := LoadHFJSON(big); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a file of %d bytes: %v", MaxHFJSONSize+1, err)
	}
	if _, err := LoadHFJSON(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a folder: %v", err)
	}
	if _, err := LoadHFJSON(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file gave no error")
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(hfMetaspaceJSON(hfLlamaDecoder)), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadHFJSON(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode([]int{1, 14, 19}); got != "Hi there" {
		t.Errorf("Decode = %q", got)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHFJSON(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a bad file's error does not name it: %v", err)
	}
}

// hfJSONOfGGUF writes the tokenizer.json Hugging Face would hold for a
// GGUF vocabulary (the file llama.cpp's converter reads, turned back):
// ByteLevel with GPT-2's regex for BPE, Llama 2's decoder sequence and
// byte fallback for SPM; control and unknown tokens as special added
// tokens, user-defined ones as plain added tokens.
func hfJSONOfGGUF(t *testing.T, v *Vocab) []byte {
	t.Helper()
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	vocab := map[string]int{}
	var adds []added
	for id, s := range v.Tokens {
		vocab[s] = id
		typ := int32(TypeNormal)
		if v.Types != nil {
			typ = v.Types[id]
		}
		switch typ {
		case TypeControl, TypeUnknown:
			adds = append(adds, added{id, s, true})
		case TypeUserDefined:
			adds = append(adds, added{id, s, false})
		}
	}
	model := map[string]any{"type": "BPE", "vocab": vocab, "merges": v.Merges}
	file := map[string]any{"added_tokens": adds, "model": model}
	if v.Model == ModelBPE {
		file["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
		file["decoder"] = map[string]any{"type": "ByteLevel"}
	} else {
		model["byte_fallback"] = true
		if v.UNK >= 0 {
			model["unk_token"] = v.Tokens[v.UNK]
		}
		var dec any
		if err := json.Unmarshal([]byte(hfLlamaDecoder), &dec); err != nil {
			t.Fatal(err)
		}
		file["decoder"] = dec
	}
	b, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A tokenizer.json of the shared GGUF vocabularies (GPT-2's 50,257 tokens,
// Llama 2's 32,000) decodes as the GGUF does: every token's piece and
// type, and llama.cpp's test cases' ids back to their text. GPT-2's also
// encodes them to llama.cpp's ids.
func TestHFJSONMatchesGGUF(t *testing.T) {
	for _, name := range []string{"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"} {
		t.Run(name, func(t *testing.T) {
			base := "testdata/tokenizer/" + name
			f, err := gguf.Open(testshared.Path(t, base))
			if err != nil {
				t.Fatal(err)
			}
			v, err := VocabFromGGUF(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			want, err := New(v)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "tokenizer.json")
			if err := os.WriteFile(path, hfJSONOfGGUF(t, v), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := LoadHFJSON(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Size() != want.Size() || got.Model() != want.Model() {
				t.Fatalf("size %d model %q, want %d %q", got.Size(), got.Model(), want.Size(), want.Model())
			}
			bad := 0
			for id := range want.Size() {
				if got.Piece(id) != want.Piece(id) || got.Type(id) != want.Type(id) {
					if bad++; bad <= 5 {
						t.Errorf("id %d: piece %q type %d, the GGUF's %q %d", id, got.Piece(id), got.Type(id), want.Piece(id), want.Type(id))
					}
				}
			}
			inputs, ids := readVocabCases(t, base)
			for i, in := range inputs {
				if d, w := got.Decode(ids[i]), want.Decode(ids[i]); d != w {
					t.Errorf("case %d %q: Decode = %q, the GGUF's %q", i, in, d, w)
				}
				if want.Model() == ModelBPE {
					if d := got.Decode(ids[i]); d != in {
						t.Errorf("case %d: Decode = %q, want %q", i, d, in)
					}
					if e := got.Encode(in, false, false); fmt.Sprint(e) != fmt.Sprint(ids[i]) {
						t.Errorf("case %d %q: Encode = %v, llama.cpp's %v", i, in, e, ids[i])
					}
				}
			}
		})
	}
}

// Real tokenizer.json files in the shared data (testdata/tokenizer/
// NAME.tokenizer.json or NAME/tokenizer.json) decode what they encode,
// and where the GGUF of the same vocabulary (NAME.gguf) is beside them,
// every id decodes as it does there.
func TestHFJSONSharedFiles(t *testing.T) {
	dir := testshared.Path(t, "testdata/tokenizer")
	var files []string
	for _, pat := range []string{"*tokenizer.json", "*/tokenizer.json"} {
		m, _ := filepath.Glob(filepath.Join(dir, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Skipf("no tokenizer.json in %s (TestHFJSONMatchesGGUF checks tokenizer.json files written from its GGUF vocabularies)", dir)
	}
	for _, path := range files {
		t.Run(filepath.Base(filepath.Dir(path))+"/"+filepath.Base(path), func(t *testing.T) {
			tok, err := LoadHFJSON(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"Hello world", "The old lighthouse keeper counted 1,247 ships.", "naïve café\n\tdone"} {
				if d := tok.Decode(tok.Encode(s, true, false)); d != s {
					t.Errorf("Decode(Encode(%q)) = %q", s, d)
				}
			}
			name := strings.TrimSuffix(strings.TrimSuffix(path, "/tokenizer.json"), ".tokenizer.json") + ".gguf"
			f, err := gguf.Open(name)
			if err != nil {
				t.Logf("no GGUF beside it (%v): decode not compared", err)
				return
			}
			defer f.Close()
			want, err := FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			for id := range min(want.Size(), tok.Size()) {
				if d, w := tok.Decode([]int{id}), want.Decode([]int{id}); d != w {
					t.Errorf("id %d: %q, the GGUF's %q", id, d, w)
				}
			}
		})
	}
}

// A ByteLevel file's split pattern picks llama.cpp's pre-tokenizer, and a
// TemplateProcessing post-processor's first special token is BOS.
func TestHFJSONPreTokenizer(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	split := func(re string) string {
		return `{"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ` + q(re) + `}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`
	}
	cases := []struct{ pre, want string }{
		{`{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}`, "gpt-2"},
		{`{"type": "ByteLevel"}`, "gpt-2"},
		{`{"type": "ByteLevel", "use_regex": false}`, "default"},
		{split(hfLlama3Pattern), "llama-bpe"},
		{split(hfQwen2Pattern), "qwen2"},
		{split(`\p{L}+|\s+`), "default"},
		{`null`, "default"},
	}
	base := hfByteLevelJSON(false)
	const old = `"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`
	if !strings.Contains(base, old) {
		t.Fatal("the test file's pre_tokenizer moved")
	}
	for _, c := range cases {
		tok := mustHF(t, strings.Replace(base, old, `"pre_tokenizer": `+c.pre, 1))
		if tok.Pre() != c.want {
			t.Errorf("pre_tokenizer %s: Pre() = %q, want %q", c.pre, tok.Pre(), c.want)
		}
	}
	// Llama 3's post-processor puts <|begin_of_text|> first.
	pp := strings.Replace(base, `"post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}`,
		`"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}`, 1)
	tok := mustHF(t, pp)
	if tok.BOS() != 22 || !tok.AddBOS() {
		t.Errorf("BOS %d, AddBOS %v; want 22, true", tok.BOS(), tok.AddBOS())
	}
	if got := tok.Encode("hello", true, false); !slices.Equal(got, []int{22, 15}) {
		t.Errorf("Encode with BOS = %v", got)
	}
}

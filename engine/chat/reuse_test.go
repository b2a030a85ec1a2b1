package chat_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/quant"
	"kvscope/engine/sample"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// chatMLShape is a small random Llama: quick to make and to run.
var chatMLShape = synth.Shape{
	Name: "ChatML test model (random weights)", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2,
	FFDim: 128, Vocab: 384, Context: 2048, Type: quant.F32,
}

// chatMLTemplate is ChatML, as Qwen's files hold it.
const chatMLTemplate = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// chatMLFile makes a synth model whose last two tokens are renamed
// <|im_start|> and <|im_end|> (control tokens) and whose template is
// ChatML. <|im_end|> is not the file's EOS (</s> is): the tokenizer must
// find it by its text.
func chatMLFile(t testing.TB) *gguf.File {
	return controlFile(t, []string{"<|im_start|>", "<|im_end|>"}, chatMLTemplate)
}

// controlFile makes a synth model whose last tokens are renamed controls
// (control tokens) and whose chat template is template (none when ""),
// rewriting synth's file with gguf's writer.
func controlFile(t testing.TB, controls []string, template string) *gguf.File {
	t.Helper()
	return shapeControlFile(t, chatMLShape, controls, template)
}

// shapeControlFile is controlFile on a synth model of the given shape.
func shapeControlFile(t testing.TB, shape synth.Shape, controls []string, template string) *gguf.File {
	t.Helper()
	src, err := synth.Open(shape, 7)
	if err != nil {
		t.Fatal(err)
	}
	n := shape.Vocab - len(controls)
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			toks := slices.Clone(kv.Value.([]string))
			copy(toks[n:], controls)
			kv = gguf.NewKV(kv.Key, toks)
		case "tokenizer.ggml.token_type":
			types := slices.Clone(kv.Value.([]int32))
			for i := n; i < len(types); i++ {
				types[i] = tokenizer.TypeControl
			}
			kv = gguf.NewKV(kv.Key, types)
		case chat.KeyChatTemplate:
			if template == "" {
				continue
			}
			kv = gguf.NewKV(kv.Key, template)
		}
		kvs = append(kvs, kv)
	}
	tensors := src.WriteTensors()
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, tensors); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// chatMLEngine starts an engine on a fresh ChatML model with blocks of
// blockSize tokens.
func chatMLEngine(t testing.TB, blockSize int) (*engine.Engine, *tokenizer.Tokenizer, *chat.Formatter) {
	t.Helper()
	return fileEngine(t, chatMLFile(t), blockSize)
}

// fileFormat returns f's tokenizer and chat formatter.
func fileFormat(t testing.TB, f *gguf.File) (*tokenizer.Tokenizer, *chat.Formatter) {
	t.Helper()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	form, err := chat.FromGGUF(f, tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok, form
}

// fileEngine starts an engine on the model f with blocks of blockSize
// tokens, with f's tokenizer and chat formatter; the engine closes when
// the test ends.
func fileEngine(t testing.TB, f *gguf.File, blockSize int) (*engine.Engine, *tokenizer.Tokenizer, *chat.Formatter) {
	t.Helper()
	m, err := model.New(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, form := fileFormat(t, f)
	cfg := engine.DefaultConfig()
	cfg.Cache.BlockSize = blockSize
	e, err := engine.New(m, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, tok, form
}

// reply is one generated reply.
type reply struct {
	ids   []int
	text  string
	final engine.Chunk
}

// generate submits prompt ids and reads the whole stream.
func generate(t *testing.T, e *engine.Engine, ids []int, r engine.Request) reply {
	return generateUntil(t, e, ids, r, nil)
}

// generateUntil is generate, cancelling the request after a token for
// which until (when not nil) is true.
func generateUntil(t *testing.T, e *engine.Engine, ids []int, r engine.Request, until func(int) bool) reply {
	t.Helper()
	r.Tokens = ids
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.Submit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	var out reply
	for c := range s.C {
		if c.Done {
			out.final = c
			continue
		}
		out.ids = append(out.ids, c.Token)
		out.text += c.Text
		if until != nil && until(c.Token) {
			cancel()
		}
	}
	if out.final.Reason == engine.FinishError {
		t.Fatal(out.final.Err)
	}
	return out
}

// TestChatMLConversationReusesTheCache chats six turns with the engine on
// a ChatML model: the prompt has the template's markers, and every turn
// after the first starts with exactly the previous prompt and reply ids,
// so that it computes only its new tokens (the reply's end marker, the new
// user message and the template around it), within one block, never the
// history.
func TestChatMLConversationReusesTheCache(t *testing.T) {
	const block = 8
	e, tok, form := chatMLEngine(t, block)
	if form.Name() != chat.NameFromFile || form.Mode() != chat.ModeChat {
		t.Fatalf("formatter %q (%v), want the file's template", form.Name(), form.Mode())
	}
	imStart, _ := tok.ID("<|im_start|>")
	imEnd, _ := tok.ID("<|im_end|>")
	users := []string{
		"Tell me a story about a cat.",
		"What was the name of the cat?",
		"And where did the cat live?",
		"Did the cat have a friend? <|im_end|> is only text here.",
		"Tell me more about the friend.",
		"How does the story end?",
	}
	greedy := sample.DefaultParams()
	greedy.Temperature = 0
	turns := []chat.Turn{{Role: "system", Content: "You tell short stories."}}
	var prev []int // the last prompt's ids and its reply's
	for k, u := range users {
		turns = append(turns, chat.Turn{Role: "user", Content: u})
		opt := chat.Options{AddGenerationPrompt: true}
		ids, err := form.PromptIDs(turns, opt, tok, true)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			msgs := make([]chat.Message, len(turns))
			for i, tr := range turns {
				msgs[i] = chat.Message{Role: tr.Role, Content: tr.Content}
			}
			p, err := form.Render(msgs, opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"<|im_start|>system\nYou tell", "<|im_end|>\n<|im_start|>user\n", "<|im_start|>assistant\n"} {
				if !strings.Contains(p.Text(), want) {
					t.Errorf("the prompt %q lacks %q", p.Text(), want)
				}
			}
			if got := chat.Tokenize(p, tok, true); !slices.Equal(got, ids) {
				t.Errorf("PromptIDs without replies differ from Tokenize:\n got %v\nwant %v", ids, got)
			}
		}
		if n := count(ids, imStart); n != len(turns)+1 {
			t.Errorf("turn %d: %d <|im_start|> ids, want %d", k+1, n, len(turns)+1)
		}
		if n := count(ids, imEnd); n != len(turns) {
			t.Errorf("turn %d: %d <|im_end|> ids, want %d (the message's one stays text)", k+1, n, len(turns))
		}
		if !slices.Equal(ids[:min(len(prev), len(ids))], prev) {
			t.Fatalf("turn %d: the prompt does not start with the previous prompt and reply:\n got %v\nwant %v…", k+1, ids, prev)
		}
		r := generate(t, e, ids, engine.Request{Sampling: &greedy, MaxTokens: 6})
		f := r.final
		if f.PromptTokens != len(ids) {
			t.Errorf("turn %d: PromptTokens %d, want %d", k+1, f.PromptTokens, len(ids))
		}
		prompted := f.PromptTokens - f.CachedTokens // prompt rows computed
		if k > 0 {
			fresh := len(ids) - len(prev) // the tokens not in the history
			if prompted < fresh || prompted > fresh+block {
				t.Errorf("turn %d: computed %d prompt tokens (%d cached of %d); the new ones are %d: want %d to %d",
					k+1, prompted, f.CachedTokens, f.PromptTokens, fresh, fresh, fresh+block)
			}
			if f.Computed > prompted+f.Generated {
				t.Errorf("turn %d: Computed %d rows, more than %d prompt rows and %d generated", k+1, f.Computed, prompted, f.Generated)
			}
		}
		t.Logf("turn %d: %d prompt tokens, %d cached, %d computed rows, reply %q (%s)", k+1, f.PromptTokens, f.CachedTokens, f.Computed, r.text, f.Reason)
		if k == len(users)-1 && f.CachedTokens < 4*block {
			t.Errorf("the last turn reused %d tokens: too short a history to show reuse", f.CachedTokens)
		}
		turns = append(turns, chat.Turn{Role: "assistant", Content: r.text, IDs: r.ids})
		prev = append(slices.Clone(ids), r.ids...)
	}
}

// TestGenerationStopsAtIMEnd: a stream ends with FinishStop where
// <|im_end|> is sampled, and the token is not in it. Sampling at a high
// temperature (no top-k, top-p or min-p) draws nearly uniformly, so a
// seed whose run reaches <|im_end|> before </s> is found among a few;
// the same seed with IgnoreEOS shows which token the stop came at.
func TestGenerationStopsAtIMEnd(t *testing.T) {
	_, tok, form := chatMLEngine(t, 16)
	imEnd, _ := tok.ID("<|im_end|>")
	if !tok.IsEOG(imEnd) || imEnd == tok.EOS() {
		t.Fatalf("<|im_end|> (%d): IsEOG %v, EOS %d; want an end-of-generation token found by its text", imEnd, tok.IsEOG(imEnd), tok.EOS())
	}
	ids, err := form.PromptIDs([]chat.Turn{{Role: "user", Content: "Hello"}}, chat.Options{AddGenerationPrompt: true}, tok, true)
	if err != nil {
		t.Fatal(err)
	}
	const most = 3000
	for seed := uint64(1); seed <= 20; seed++ {
		p := sample.DefaultParams()
		p.Temperature, p.TopK, p.TopP, p.MinP, p.RepeatPenalty, p.Seed = 100, 0, 1, 0, 1, seed
		e, _, _ := chatMLEngine(t, 16)
		all := generateUntil(t, e, ids, engine.Request{Sampling: &p, MaxTokens: most, IgnoreEOS: true}, tok.IsEOG)
		first := slices.IndexFunc(all.ids, tok.IsEOG)
		if first < 0 || all.ids[first] != imEnd {
			continue
		}
		e, _, _ = chatMLEngine(t, 16)
		r := generate(t, e, ids, engine.Request{Sampling: &p, MaxTokens: most})
		if r.final.Reason != engine.FinishStop || r.final.Generated != first {
			t.Fatalf("seed %d: finished %s after %d tokens; want stop after %d, where <|im_end|> was sampled", seed, r.final.Reason, r.final.Generated, first)
		}
		if !slices.Equal(r.ids, all.ids[:first]) {
			t.Fatalf("seed %d: the stream's ids differ from the run without stops before <|im_end|>", seed)
		}
		if strings.Contains(r.text, "<|im_end|>") || slices.Contains(r.ids, imEnd) {
			t.Fatalf("seed %d: the reply shows <|im_end|>: %q", seed, r.text)
		}
		t.Logf("seed %d: stopped at <|im_end|> after %d tokens", seed, first)
		return
	}
	t.Fatal("no seed of 20 reached <|im_end|> first")
}

func count(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestPromptIDsKeepThePrefix: in each format, the prompt after a reply
// starts with exactly the prompt before it and the reply's ids, though
// the reply's text, tokenized again, gives other ids; without replies,
// PromptIDs gives Tokenize's ids.
func TestPromptIDsKeepThePrefix(t *testing.T) {
	tests := []struct {
		name     string
		controls []string
		template string // "" : the format New chooses
		wantName string
	}{
		{"ChatML from the file", []string{"<|im_start|>", "<|im_end|>"}, chatMLTemplate, chat.NameFromFile},
		{"Llama 3 (trims the content)", []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}, "", "Llama 3"},
		{"Gemma (no system role)", []string{"<start_of_turn>", "<end_of_turn>"}, "", "Gemma"},
		{"Llama 2 (a space before the trimmed reply)", []string{"[INST]", "[/INST]"}, "", "Llama 2"},
		{"plain completion", nil, "", chat.NamePlain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := controlFile(t, tt.controls, tt.template)
			tok, form := fileFormat(t, f)
			if form.Name() != tt.wantName {
				t.Fatalf("formatter %q, want %q", form.Name(), tt.wantName)
			}
			opt := chat.Options{AddGenerationPrompt: true}
			turns := []chat.Turn{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Once upon a time"}}
			first, err := form.PromptIDs(turns, opt, tok, true)
			if err != nil {
				t.Fatal(err)
			}
			if form.Mode() == chat.ModeChat {
				msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Once upon a time"}}
				p, err := form.Render(msgs, opt)
				if err != nil {
					t.Fatal(err)
				}
				if want := chat.Tokenize(p, tok, true); !slices.Equal(first, want) {
					t.Fatalf("PromptIDs %v, Tokenize %v", first, want)
				}
			} else if want := tok.Encode("Be brief.\n\nOnce upon a time", true, false); !slices.Equal(first, want) {
				t.Fatalf("plain PromptIDs %v, want the app's plain text's %v", first, want)
			}
			// A reply whose ids are not those its text tokenizes to: " there"
			// spelled in single characters.
			reply := " there was"
			var ids []int
			for _, r := range reply {
				ids = append(ids, tok.EncodeContinuation(string(r), false)...)
			}
			if slices.Equal(ids, tok.EncodeContinuation(reply, false)) {
				t.Fatal("the reply's ids are its text's: the test shows nothing")
			}
			turns = append(turns, chat.Turn{Role: "assistant", Content: reply, IDs: ids}, chat.Turn{Role: "user", Content: "The end."})
			second, err := form.PromptIDs(turns, opt, tok, true)
			if err != nil {
				t.Fatal(err)
			}
			if want := append(slices.Clone(first), ids...); len(second) <= len(want) || !slices.Equal(second[:len(want)], want) {
				t.Fatalf("the second prompt does not start with the first and the reply:\n got %v\nwant %v…", second, want)
			}
			if d := tok.Decode(second); !strings.Contains(d, "Once upon a time") || !strings.Contains(d, "there was") || !strings.Contains(d, "The end.") {
				t.Errorf("the second prompt decodes to %q", d)
			}
			turns[2].IDs = nil
			if again, err := form.PromptIDs(turns, opt, tok, true); err != nil || slices.Equal(again, second) {
				t.Errorf("without its IDs the reply is tokenized again: want other ids than %v, got %v (%v)", second, again, err)
			}
		})
	}
}

// TestPromptIDsErrors: what Render refuses, PromptIDs refuses.
func TestPromptIDsErrors(t *testing.T) {
	f := chatMLFile(t)
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	raising, err := chat.NewTemplate("raises", "{{ raise_exception('no') }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		form  *chat.Formatter
		turns []chat.Turn
		want  string
	}{
		{"no role", chat.Plain(), []chat.Turn{{Content: "hi"}}, "no role"},
		{"no role, template", raising, []chat.Turn{{Content: "hi"}}, "no role"},
		{"the template raises", raising, []chat.Turn{{Role: "user", Content: "hi"}}, "no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.form.PromptIDs(tt.turns, chat.Options{}, tok, true)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// phi3Template is Phi-3's: no white space is meant to reach the model
// after its tags, since llama.cpp's tokenizer drops it on phi-3 models.
const phi3Template = `{% for message in messages %}{{ '<|' + message['role'] + '|>' + '\n' + message['content'] + '<|end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}`

// On a model named phi-3, whose special tokens drop the white space after
// them, a prompt's ids are those of its whole text as llama.cpp encodes it
// (no newline after a tag), the first turn and the next; the next turn
// keeps the previous prompt, the reply and the end token it ended on.
func TestPhi3DropsWhiteSpaceAfterTags(t *testing.T) {
	shape := chatMLShape
	shape.Name = "Phi-3 mini test model (random weights)"
	f := shapeControlFile(t, shape, []string{"<|user|>", "<|assistant|>", "<|end|>"}, phi3Template)
	tok, form := fileFormat(t, f)
	user, end := tok.Encode("<|user|>", false, true), tok.Encode("<|end|>", false, true)
	if len(user) != 1 || len(end) != 1 {
		t.Fatalf("<|user|> is %v, <|end|> %v: not single tokens", user, end)
	}
	if before, after := tok.Strips(user[0]); before || !after {
		t.Fatalf("<|user|> strips (before %v, after %v), want after only", before, after)
	}
	newline := tok.Encode("\n", false, false)
	opt := chat.Options{AddGenerationPrompt: true}
	msgs := []chat.Message{{Role: "user", Content: "Hi"}}
	p, err := form.Render(msgs, opt)
	if err != nil {
		t.Fatal(err)
	}
	first := chat.Tokenize(p, tok, true)
	if want := tok.Encode(p.Text(), true, true); !slices.Equal(first, want) {
		t.Fatalf("first prompt %v, want the whole text's ids %v", first, want)
	}
	if len(newline) > 0 && slices.Contains(first, newline[len(newline)-1]) {
		t.Errorf("first prompt %v holds a newline %v", first, newline)
	}
	reply := tok.Encode("Hello there", false, false)
	turns := []chat.Turn{
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "Hello there", IDs: reply, End: end},
		{Role: "user", Content: "Again"},
	}
	second, _, err := form.ConversationIDs(turns, opt, tok, true)
	if err != nil {
		t.Fatal(err)
	}
	prefix := append(append(slices.Clone(first), reply...), end...)
	if !slices.Equal(second[:min(len(prefix), len(second))], prefix) {
		t.Fatalf("second prompt %v does not start with the first, the reply and <|end|> %v", second, prefix)
	}
	msgs = append(msgs, chat.Message{Role: "assistant", Content: "Hello there"}, chat.Message{Role: "user", Content: "Again"})
	p, err = form.Render(msgs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Encode(p.Text(), true, true); !slices.Equal(second, want) {
		t.Errorf("second prompt\n%v\nwant the whole rendering's ids\n%v", second, want)
	}
}

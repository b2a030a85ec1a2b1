package chat_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/sample"
	"kvscope/engine/tokenizer"
	"kvscope/internal/chattest"
)

// withTemplate parses the shared model file rel with its chat template
// replaced by template.
func withTemplate(t testing.TB, rel, template string) *gguf.File {
	t.Helper()
	f, err := gguf.Parse(chattest.WithTemplate(t, rel, template))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConversationKeepsTheHistory chats three turns on real models, a
// SentencePiece one (stories260K) and a byte-level BPE one (the qwen2
// parity model), through ChatML, Llama 2 and Mistral [INST], Llama 3,
// Gemma and Phi-3 templates: each prompt after the first starts with
// exactly the previous prompt and reply as the model saw them, and
// computes only what the new message adds, within one block. A template
// that drops a reply's start from the history (DeepSeek R1's) re-renders
// it and says how many ids that cost.
func TestConversationKeepsTheHistory(t *testing.T) {
	const block = 8
	templates := []struct {
		name     string
		source   func(testing.TB) string
		rerender bool // the template rewrites earlier turns
	}{
		{"ChatML (Qwen 2.5)", func(t testing.TB) string { return chattest.Template(t, "Qwen-Qwen2.5-7B-Instruct.jinja") }, false},
		{"Llama 2 [INST]", func(testing.TB) string { return chattest.Llama2 }, false},
		{"Mistral [INST] (Nemo)", func(t testing.TB) string { return chattest.Template(t, "mistralai-Mistral-Nemo-Instruct-2407.jinja") }, false},
		{"Llama 3.1", func(t testing.TB) string { return chattest.Template(t, "meta-llama-Llama-3.1-8B-Instruct.jinja") }, false},
		{"Gemma 2", func(t testing.TB) string { return chattest.Template(t, "google-gemma-2-2b-it.jinja") }, false},
		{"Phi-3.5", func(t testing.TB) string { return chattest.Template(t, "microsoft-Phi-3.5-mini-instruct.jinja") }, false},
		{"DeepSeek R1 (rewrites replies)", func(t testing.TB) string {
			return chattest.Template(t, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
		}, true},
	}
	models := []struct{ name, rel string }{
		{"SPM stories260K", "models/stories260K.gguf"},
		{"BPE qwen2", "models/parity/parity-qwen2-Q8_0.gguf"},
	}
	users := []string{"Once upon a time", "The dog ran", "A cat sat"}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, md := range models {
		for _, tt := range templates {
			t.Run(md.name+"/"+tt.name, func(t *testing.T) {
				f := withTemplate(t, md.rel, tt.source(t))
				e, tok, form := fileEngine(t, f, block)
				greedy := sample.DefaultParams()
				greedy.Temperature = 0
				opt := chat.Options{AddGenerationPrompt: true, Now: func() time.Time { return now }}
				var turns []chat.Turn
				var history []int // the last prompt and its reply
				rerendered := 0
				for k, u := range users {
					turns = append(turns, chat.Turn{Role: "user", Content: u})
					ids, reuse, err := form.ConversationIDs(turns, opt, tok, true)
					if err != nil {
						t.Fatal(err)
					}
					rerendered += reuse.Recomputed
					r := generate(t, e, ids, engine.Request{Sampling: &greedy, MaxTokens: 12})
					f := r.final
					t.Logf("turn %d: %d prompt tokens, %d cached, kept %d, recomputed %d; reply %q (%s, end %v)",
						k+1, f.PromptTokens, f.CachedTokens, reuse.Kept, reuse.Recomputed, r.text, f.Reason, f.End)
					if k > 0 && !tt.rerender {
						if !slices.Equal(ids[:min(len(history), len(ids))], history) {
							t.Fatalf("turn %d: the prompt does not start with the previous prompt and reply:\n got %v\nwant %v…", k+1, ids, history)
						}
						if reuse.Recomputed != 0 || reuse.Kept < len(history) {
							t.Errorf("turn %d: %+v, want all %d history ids kept", k+1, reuse, len(history))
						}
						fresh := len(ids) - len(history)
						if computed := f.PromptTokens - f.CachedTokens; computed > fresh+block {
							t.Errorf("turn %d: computed %d prompt tokens (%d cached of %d); only %d are new: want at most %d",
								k+1, computed, f.CachedTokens, f.PromptTokens, fresh, fresh+block)
						}
					}
					// The fresh rendering holds the same conversation.
					msgs := make([]chat.Message, len(turns))
					for i, tr := range turns {
						msgs[i] = chat.Message{Role: tr.Role, Content: tr.Content}
					}
					p, err := form.Render(msgs, opt)
					if err != nil {
						t.Fatal(err)
					}
					if d := tok.Decode(ids); !strings.Contains(d, u) {
						t.Errorf("turn %d: the prompt %q lacks the new message", k+1, d)
					}
					if k == 0 && !slices.Equal(ids, chat.Tokenize(p, tok, true)) {
						t.Errorf("the first prompt is not its rendering tokenized")
					}
					turns = append(turns, chat.Turn{Role: "assistant", Content: r.text, IDs: r.ids, End: f.End})
					history = append(slices.Clone(ids), r.ids...)
				}
				if tt.rerender && rerendered == 0 {
					t.Errorf("the template rewrites earlier replies, but no history was re-rendered")
				}
			})
		}
	}
}

// TestConversationEnds: a reply's end-of-generation token stays in the
// history where the template writes it after the reply (in any spacing),
// and is dropped where it does not; a reply the template trims keeps its
// ids.
func TestConversationEnds(t *testing.T) {
	f := withTemplate(t, "models/stories260K.gguf", chattest.Llama2)
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	eos := tok.EOS()
	reply := " there was\n" // the template strips it
	var ids []int
	for _, r := range reply {
		ids = append(ids, tok.EncodeContinuation(string(r), false)...)
	}
	opt := chat.Options{AddGenerationPrompt: true}
	for _, tt := range []struct {
		name     string
		template string
		keepsEnd bool
	}{
		{"Llama 2 writes ' </s>'", chattest.Llama2, true},
		{"Zephyr writes '</s>' and text after it", "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] | trim + '</s>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}", true},
		{"a role: text format writes no end", `{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			form, err := chat.NewTemplate("test", tt.template, "<s>", "</s>")
			if err != nil {
				t.Fatal(err)
			}
			turns := []chat.Turn{{Role: "user", Content: "Once upon a time"}}
			first, err := form.PromptIDs(turns, opt, tok, true)
			if err != nil {
				t.Fatal(err)
			}
			turns = append(turns, chat.Turn{Role: "assistant", Content: reply, IDs: ids, End: []int{eos}}, chat.Turn{Role: "user", Content: "The end."})
			second, reuse, err := form.ConversationIDs(turns, opt, tok, true)
			if err != nil {
				t.Fatal(err)
			}
			want := append(slices.Clone(first), ids...)
			if tt.keepsEnd {
				want = append(want, eos)
			}
			if len(second) <= len(want) || !slices.Equal(second[:len(want)], want) {
				t.Fatalf("the second prompt does not start with the first, the reply and its end:\n got %v\nwant %v…", second, want)
			}
			if !tt.keepsEnd && second[len(want)] == eos {
				t.Errorf("an end the template does not write stays in the history: %v", second)
			}
			if reuse.Kept != len(first)+len(ids) || reuse.Recomputed != 0 {
				t.Errorf("reuse %+v, want the %d ids of the prompt and reply kept and none recomputed", reuse, len(first)+len(ids))
			}
			if d := tok.Decode(second[len(want):]); !strings.Contains(d, "The end.") {
				t.Errorf("the new part decodes to %q", d)
			}
			if tt.keepsEnd {
				// After the end token the new part is encoded as after any
				// control token (SentencePiece's space prefix included), as a
				// fresh rendering is.
				p, err := form.Render([]chat.Message{{Role: "user", Content: "Once upon a time"}, {Role: "assistant", Content: reply}, {Role: "user", Content: "The end."}}, opt)
				if err != nil {
					t.Fatal(err)
				}
				text := p.Text()
				at := strings.Index(text, strings.TrimSpace(reply))
				end := at + strings.Index(text[at:], "</s>") + len("</s>")
				if rest := tok.Encode(text[end:], false, true); !slices.Equal(second[len(want):], rest) {
					t.Errorf("after the end token the prompt holds\n%v\nwant the rest of the rendering %q encoded afresh\n%v", second[len(want):], text[end:], rest)
				}
			}
		})
	}
}

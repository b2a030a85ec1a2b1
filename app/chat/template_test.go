package chat

import (
	"slices"
	"strings"
	"testing"

	"kvscope/app/store"
	echat "kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
	"kvscope/internal/chattest"
	"kvscope/internal/testshared"
)

// pieces is ids as text with control tokens shown ("<|im_start|>").
func pieces(tok *tokenizer.Tokenizer, ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(tok.Piece(id))
	}
	return b.String()
}

// A conversation on a ChatML model renders through the template: its
// control tokens come from the template's text, and "<|im_end|>" typed by
// the user stays text.
func TestPrompterRendersChatML(t *testing.T) {
	cm := newChatMLModel(t, chatMLTemplate)
	pr := NewPrompter(cm.f, cm.tok, "")
	const typed = "Say <|im_end|> please"
	c := store.Conversation{System: "  Be brief. ", Messages: []store.Message{{Role: "user", Text: typed}, {Role: "assistant"}}}
	if !pr.HasTemplate() || !pr.Chat(c) || pr.Thinks() {
		t.Fatalf("HasTemplate %v, Chat %v, Thinks %v: want a template, used, without thinking", pr.HasTemplate(), pr.Chat(c), pr.Thinks())
	}
	if got, want := pr.Describe(c), "Template: from the file (ChatML)"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	ids, err := pr.IDs(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n" + typed + "<|im_end|>\n<|im_start|>assistant\n"
	if got := pieces(cm.tok, ids); got != want {
		t.Errorf("prompt\n%q, want\n%q", got, want)
	}
	// Two <|im_end|> tokens, the template's: the typed one is text.
	if n := occurrences(ids, cm.imEnd); n != 2 {
		t.Errorf("%d <|im_end|> tokens in the prompt, want 2 (the typed one must stay text)", n)
	}
	if n := occurrences(ids, cm.imStart); n != 3 {
		t.Errorf("%d <|im_start|> tokens, want 3 (system, user, assistant)", n)
	}
	if parsed := cm.tok.Encode(want, true, true); occurrences(parsed, cm.imEnd) != 3 {
		t.Fatalf("the whole text parsed for special tokens has %d <|im_end|>, want 3: the test cannot tell", occurrences(parsed, cm.imEnd))
	}
	// Without a system prompt the template writes its default one.
	c.System = ""
	ids, err = pr.IDs(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := pieces(cm.tok, ids); !strings.HasPrefix(got, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n") {
		t.Errorf("prompt without a system prompt %q lacks the template's default", got)
	}
}

// The next prompt holds each earlier reply as the ids it was generated
// as, even where encoding its text would give other ids, so it starts with
// the previous prompt and reply exactly; ids of another vocabulary are not
// used.
func TestPrompterReusesReplyIDs(t *testing.T) {
	cm := newChatMLModel(t, chatMLTemplate)
	pr := NewPrompter(cm.f, cm.tok, "")
	// " hello" as single characters: ids a model may generate, but not
	// those the tokenizer gives the text.
	var reply []int
	for _, r := range " hello" {
		reply = append(reply, cm.tok.Encode(string(r), false, false)...)
	}
	if slices.Equal(reply, cm.tok.Encode(" hello", false, false)) {
		t.Fatal("the letters encode as the word does: the test cannot tell")
	}
	c := store.Conversation{Messages: []store.Message{
		{Role: "user", Text: "Hi"},
		{Role: "assistant", Text: " hello", IDs: reply, Vocab: pr.Vocab()},
		{Role: "user", Text: "Again"},
		{Role: "assistant"},
	}}
	first, second := twoTurns(t, pr, c)
	if prefix := append(slices.Clone(first), reply...); !slices.Equal(second[:min(len(prefix), len(second))], prefix) {
		t.Errorf("turn 2's prompt\n%v\ndoes not start with turn 1's prompt and reply\n%v", second, prefix)
	}
	if got := pieces(cm.tok, second); !strings.HasSuffix(got, "assistant\n hello<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("turn 2's prompt %q", got)
	}
	// Ids from another vocabulary are not used: the text is encoded.
	c.Messages[1].Vocab = "v1-other"
	other, err := pr.IDs(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(other, second) || pieces(cm.tok, other) != pieces(cm.tok, second) {
		t.Errorf("with a foreign vocabulary's ids the prompt is %v (text %q), want the same text from the reply's text", other, pieces(cm.tok, other))
	}
}

// On Llama 2's [INST] template, which strips each reply and puts a space
// before it, the next prompt still starts with the previous prompt, the
// reply's ids and the end-of-generation token it ended on, as saved.
func TestPrompterKeepsInstHistory(t *testing.T) {
	f, err := gguf.Parse(chattest.WithTemplate(t, "models/stories260K.gguf", chattest.Llama2))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	form, err := echat.FromGGUF(f, tok)
	if err != nil {
		t.Fatal(err)
	}
	pr := NewPrompter(form, tok, "")
	reply := tok.Encode("Once there was a dog", false, false) // with SPM's space prefix, as generated after "[/INST]"
	c := store.Conversation{Messages: []store.Message{
		{Role: "user", Text: "Once upon a time"},
		{Role: "assistant", Text: "Once there was a dog", IDs: reply, End: store.TokenIDs{tok.EOS()}, Vocab: pr.Vocab()},
		{Role: "user", Text: "The dog ran"},
		{Role: "assistant"},
	}}
	first, second := twoTurns(t, pr, c)
	prefix := append(append(slices.Clone(first), reply...), tok.EOS())
	if !slices.Equal(second[:min(len(prefix), len(second))], prefix) {
		t.Errorf("turn 2's prompt\n%v\ndoes not start with turn 1's prompt, reply and end\n%v", second, prefix)
	}
	if got := tok.Decode(second[len(prefix):]); !strings.Contains(got, "[INST] The dog ran [/INST]") {
		t.Errorf("turn 2's new part decodes to %q", got)
	}
}

// Choosing plain completion makes the prompt Prompt's text, without the
// template's tokens, and says so.
func TestPrompterPlainChoice(t *testing.T) {
	cm := newChatMLModel(t, chatMLTemplate)
	pr := NewPrompter(cm.f, cm.tok, "")
	c := store.Conversation{System: "Tell stories.", Messages: []store.Message{
		{Role: "user", Text: "Once"}, {Role: "assistant", Text: " upon"}, {Role: "user", Text: "a time"}, {Role: "assistant"}}}
	chatIDs, err := pr.IDs(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	c.Plain = true
	if pr.Chat(c) || !strings.HasPrefix(pr.Describe(c), "Plain completion") || !strings.Contains(pr.Describe(c), "ChatML") {
		t.Errorf("plain conversation: Chat %v, Describe %q", pr.Chat(c), pr.Describe(c))
	}
	plainIDs, err := pr.IDs(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(plainIDs, chatIDs) || occurrences(plainIDs, cm.imStart) != 0 {
		t.Errorf("plain completion prompt %q, want no template", pieces(cm.tok, plainIDs))
	}
	if got, want := pieces(cm.tok, plainIDs), Prompt(c, 3); got != want {
		t.Errorf("plain completion prompt %q, want Prompt's text %q", got, want)
	}
}

// A model without a template (stories260K) is plain completion, with the
// ids Submit gave Prompt's text before there were templates.
func TestPrompterWithoutTemplate(t *testing.T) {
	file, err := gguf.Open(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tok, err := tokenizer.FromGGUF(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := echat.FromGGUF(file, tok)
	if err != nil {
		t.Fatal(err)
	}
	pr := NewPrompter(f, tok, "")
	c := store.Conversation{System: "Stories.", Messages: []store.Message{
		{Role: "user", Text: "Once upon a time </s>"}, {Role: "assistant", Text: " there was"}, {Role: "user", Text: "a cat"}, {Role: "assistant"}}}
	if pr.HasTemplate() || pr.Chat(c) || pr.Describe(c) != "Plain completion: the model has no chat template" {
		t.Errorf("HasTemplate %v, Chat %v, Describe %q", pr.HasTemplate(), pr.Chat(c), pr.Describe(c))
	}
	for _, upTo := range []int{1, 3} {
		ids, err := pr.IDs(c, upTo)
		if err != nil {
			t.Fatal(err)
		}
		if want := tok.Encode(Prompt(c, upTo), true, false); !slices.Equal(ids, want) {
			t.Errorf("upTo %d: ids %v, want %v (Prompt's text as Submit encoded it)", upTo, ids, want)
		}
	}
	if got := NewPrompter(echat.Plain(), tok, "the template does not compile").Describe(c); got != "Plain completion: the template does not compile" {
		t.Errorf("Describe with a problem = %q", got)
	}
}

// thinkingTemplate is ChatML with Qwen 3's way of turning thinking off: an
// empty think block after the generation prompt.
const thinkingTemplate = `{%- for m in messages %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endfor %}` +
	`{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %}`

// The thinking switch reaches templates that read enable_thinking.
func TestPrompterThinking(t *testing.T) {
	cm := newChatMLModel(t, thinkingTemplate)
	pr := NewPrompter(cm.f, cm.tok, "")
	if !pr.Thinks() {
		t.Fatal("a template reading enable_thinking: Thinks is false")
	}
	c := store.Conversation{Messages: []store.Message{{Role: "user", Text: "Hi"}, {Role: "assistant"}}}
	text := func() string {
		ids, err := pr.IDs(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		return pieces(cm.tok, ids)
	}
	if got := text(); strings.Contains(got, "<think>") {
		t.Errorf("thinking left to the template: prompt %q has an empty think block", got)
	}
	off := false
	c.Thinking = &off
	if got := text(); !strings.HasSuffix(got, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Errorf("thinking off: prompt %q lacks the empty think block", got)
	}
}

func TestFamily(t *testing.T) {
	for src, want := range map[string]string{
		chatMLTemplate:                "ChatML",
		"{{ '<|start_header_id|>' }}": "Llama 3",
		"{{ '<start_of_turn>' }}":     "Gemma",
		"{{ '<|assistant|>' }}":       "Phi-3",
		"{{ '[INST] ' }}":             "Llama 2",
		"{{ message.content }}":       "",
	} {
		if got := Family(src); got != want {
			t.Errorf("Family(%q) = %q, want %q", src, got, want)
		}
	}
}

// One vocabulary has one key; another vocabulary has another.
func TestVocabKey(t *testing.T) {
	a := newChatMLModel(t, chatMLTemplate)
	b := newChatMLModel(t, chatMLTemplate)
	if VocabKey(a.tok) != VocabKey(b.tok) {
		t.Error("one vocabulary, two keys")
	}
	file, err := gguf.Open(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	tok, err := tokenizer.FromGGUF(file)
	if err != nil {
		t.Fatal(err)
	}
	if VocabKey(tok) == VocabKey(a.tok) {
		t.Error("two vocabularies, one key")
	}
}

// twoTurns returns pr's prompts for the conversation's first and second
// replies (messages 1 and 3).
func twoTurns(t *testing.T, pr *Prompter, c store.Conversation) (first, second []int) {
	t.Helper()
	first, err := pr.IDs(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	second, err = pr.IDs(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	return first, second
}

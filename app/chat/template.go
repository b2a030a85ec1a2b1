// This file holds the Prompter: a conversation's prompt made through the
// model's chat template, or as plain completion, and how the pane names it.

package chat

import (
	"fmt"
	"hash/fnv"
	"io"
	"strings"

	"kvscope/app/store"
	echat "kvscope/engine/chat"
	"kvscope/engine/tokenizer"
)

// Prompter makes the prompts of conversations for one model, as token ids.
// A conversation renders through the model's chat template (see package
// kvscope/engine/chat), unless the model has none or the conversation
// chose plain completion (store.Conversation.Plain); then it is the text
// Prompt makes. Special tokens come only from the template's own text:
// what the user typed is always tokenized as text, so "<|im_end|>" in a
// message stays those characters.
//
// Each reply keeps the token ids the model generated (store.Message.IDs),
// and the next prompt holds them as they are, so that turn N+1's prompt
// starts with exactly the ids the prefix cache holds for turn N's prompt
// and reply. A Prompter is immutable and safe for concurrent use.
type Prompter struct {
	tmpl    *echat.Formatter // the model's: Plain when it has no template
	tok     *tokenizer.Tokenizer
	vocab   string
	problem string // why the model's template is not used, or ""
}

// NewPrompter returns the Prompter of a model whose formatter is f (from
// echat.FromGGUF; nil is plain completion) and whose tokenizer is tok.
// problem, when not "", says why the model's template could not be used
// (f is then plain completion), for Describe.
func NewPrompter(f *echat.Formatter, tok *tokenizer.Tokenizer, problem string) *Prompter {
	if f == nil {
		f = echat.Plain()
	}
	return &Prompter{tmpl: f, tok: tok, vocab: VocabKey(tok), problem: problem}
}

// VocabKey names a tokenizer's vocabulary (its token texts and types), so
// that the token ids of a reply are used again only with the vocabulary
// they came from.
func VocabKey(tok *tokenizer.Tokenizer) string {
	h := fnv.New64a()
	var b [2]byte
	for i := range tok.Size() {
		io.WriteString(h, tok.Token(i))
		b[1] = byte(tok.Type(i))
		h.Write(b[:])
	}
	return fmt.Sprintf("v1-%d-%016x", tok.Size(), h.Sum64())
}

// Vocab returns the vocabulary's key (see VocabKey).
func (p *Prompter) Vocab() string { return p.vocab }

// HasTemplate reports whether the model has a chat template, so that
// choosing plain completion changes something.
func (p *Prompter) HasTemplate() bool { return p.tmpl.Mode() == echat.ModeChat }

// Thinks reports whether the model's template reads enable_thinking, so
// that the thinking switch changes something.
func (p *Prompter) Thinks() bool {
	return p.HasTemplate() && strings.Contains(p.tmpl.Source(), "enable_thinking")
}

// Chat reports whether c renders through the model's chat template.
func (p *Prompter) Chat(c store.Conversation) bool { return p.HasTemplate() && !c.Plain }

// TemplateName names the model's template (see TemplateName); "" when it
// has none.
func (p *Prompter) TemplateName() string {
	if !p.HasTemplate() {
		return ""
	}
	return TemplateName(p.tmpl)
}

// TemplateName names a chat template with the format its text shows, such
// as "from the file (ChatML)" or "Llama 3 (built in, chosen from the
// vocabulary)".
func TemplateName(f *echat.Formatter) string {
	name := f.Name()
	if name != echat.NameFromFile {
		return name + " (built in, chosen from the vocabulary)"
	}
	if fam := Family(f.Source()); fam != "" {
		return name + " (" + fam + ")"
	}
	return name
}

// Describe says how c's prompt is made, for the pane: "Template: from the
// file (ChatML)", or "Plain completion" with why.
func (p *Prompter) Describe(c store.Conversation) string {
	switch {
	case p.Chat(c):
		return "Template: " + p.TemplateName()
	case p.HasTemplate():
		return "Plain completion, chosen for this conversation (the model's template: " + p.TemplateName() + ")"
	case p.problem != "":
		return "Plain completion: " + p.problem
	}
	return "Plain completion: the model has no chat template"
}

// families are the chat formats Family tells apart, by the control tokens
// their templates write.
var families = []struct{ name, marker string }{
	{"ChatML", "<|im_start|>"},
	{"Llama 3", "<|start_header_id|>"},
	{"Gemma", "<start_of_turn>"},
	{"Phi-3", "<|assistant|>"},
	{"Llama 2", "[INST]"},
}

// Family names the chat format a template's source writes (ChatML,
// Llama 3, Gemma, Phi-3 or Llama 2), or "" when it is none of them.
func Family(source string) string {
	for _, f := range families {
		if strings.Contains(source, f.marker) {
			return f.name
		}
	}
	return ""
}

// Turns returns the turns of c before message index upTo, as the chat
// template sees them: the system prompt (trimmed, when not empty), then
// the messages, each reply with the token ids it was generated as when
// they belong to this vocabulary.
func (p *Prompter) Turns(c store.Conversation, upTo int) []echat.Turn {
	upTo = min(max(upTo, 0), len(c.Messages))
	turns := make([]echat.Turn, 0, upTo+1)
	if s := strings.TrimSpace(c.System); s != "" {
		turns = append(turns, echat.Turn{Role: "system", Content: s})
	}
	for _, m := range c.Messages[:upTo] {
		t := echat.Turn{Role: m.Role, Content: m.Text}
		if m.Role == "assistant" && m.Vocab == p.vocab && len(m.IDs) > 0 {
			t.IDs, t.End = m.IDs, m.End
		}
		turns = append(turns, t)
	}
	return turns
}

// TemplateOptions returns the template options of c's prompt: a generation prompt
// after the turns, and c's thinking choice.
func TemplateOptions(c store.Conversation) echat.Options {
	return echat.Options{AddGenerationPrompt: true, EnableThinking: c.Thinking}
}

// IDs returns the prompt for generating the reply at message index upTo of
// c (the messages before it are the context), as token ids with BOS where
// the vocabulary asks for it. With the template, special tokens come from
// its text only; in plain completion the prompt is Prompt's text. Either
// way each earlier reply is the ids it was generated as.
func (p *Prompter) IDs(c store.Conversation, upTo int) ([]int, error) {
	if p.Chat(c) {
		ids, err := p.tmpl.PromptIDs(p.Turns(c, upTo), TemplateOptions(c), p.tok, true)
		if err != nil {
			return nil, fmt.Errorf("the chat template (%s) failed: %w; choose plain completion for this conversation to go on without it", p.TemplateName(), err)
		}
		return ids, nil
	}
	return echat.Plain().PromptIDs(p.Turns(c, upTo), echat.Options{}, p.tok, true)
}

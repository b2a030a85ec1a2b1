package chat

import (
	"bytes"
	"testing"

	"kvscope/engine"
	echat "kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// chatMLTemplate is Qwen 2.5's way of writing ChatML, without tools: a
// default system prompt when the conversation has none.
const chatMLTemplate = `{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{%- endif %}
{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`

// chatMLShape is a small qwen2-style model with a byte-level BPE
// vocabulary, whose control tokens chatMLFile renames.
var chatMLShape = synth.Shape{
	Name: "kvscope ChatML test model (random weights)", Dim: 256, Layers: 2,
	Heads: 4, KVHeads: 2, FFDim: 512, Vocab: 2048, Context: 2048, Type: synth.Small.Type,
	Arch: "qwen2", Pre: "qwen2", Biases: true, Tied: true,
}

// chatMLFile makes a GGUF model whose vocabulary has ChatML's control
// tokens <|im_start|> and <|im_end|> (the end of a turn, and EOS) and
// whose tokenizer.chat_template is template: synth's model with two of
// its reserved control tokens renamed, written again with gguf.Write.
func chatMLFile(t testing.TB, template string) *gguf.File {
	t.Helper()
	src, err := synth.Open(chatMLShape, 7)
	if err != nil {
		t.Fatal(err)
	}
	tokens, ok := src.Strings("tokenizer.ggml.tokens")
	if !ok {
		t.Fatal("synth wrote no tokens")
	}
	tokens = append([]string(nil), tokens...)
	reserved := len(tokens) - 256 + 2 // the first reserved control token
	imStart, imEnd := reserved, reserved+1
	tokens[imStart], tokens[imEnd] = "<|im_start|>", "<|im_end|>"
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			kv = gguf.NewKV(kv.Key, tokens)
		case "tokenizer.ggml.eos_token_id":
			kv = gguf.NewKV(kv.Key, uint32(imEnd))
		case "tokenizer.chat_template":
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

// chatMLModel is chatMLFile's model, tokenizer and formatter.
type chatMLModel struct {
	m   *model.Model
	tok *tokenizer.Tokenizer
	f   *echat.Formatter
	// imStart and imEnd are the ids of <|im_start|> and <|im_end|>.
	imStart, imEnd int
}

func newChatMLModel(t testing.TB, template string) chatMLModel {
	t.Helper()
	file := chatMLFile(t, template)
	m, err := model.New(file)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := echat.FromGGUF(file, tok)
	if err != nil {
		t.Fatal(err)
	}
	s, ok1 := tok.ID("<|im_start|>")
	e, ok2 := tok.ID("<|im_end|>")
	if !ok1 || !ok2 || tok.Type(s) != tokenizer.TypeControl || !tok.IsEOG(e) {
		t.Fatalf("the test vocabulary lacks ChatML's control tokens (%v %v), or <|im_end|> does not end a turn", ok1, ok2)
	}
	return chatMLModel{m: m, tok: tok, f: f, imStart: s, imEnd: e}
}

// engine starts an engine on the model, closed when the test ends.
func (c chatMLModel) engine(t testing.TB) *engine.Engine {
	t.Helper()
	e, err := engine.New(c.m, c.tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// occurrences returns how often id occurs in ids.
func occurrences(ids []int, id int) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

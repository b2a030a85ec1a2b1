// Package chattest makes model files with a chosen chat template for
// tests: a shared model rewritten with gguf's writer.
package chattest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"kvscope/engine/gguf"
	"kvscope/internal/testshared"
)

// keyChatTemplate is the GGUF key of a model's chat template
// (engine/chat.KeyChatTemplate, which this package cannot import from
// engine/chat's own tests).
const keyChatTemplate = "tokenizer.chat_template"

// Llama2 is Llama 2 chat's template as its files hold it: each reply
// stripped, with a space before it and " </s>" after it, each user turn
// after "<s>[INST] ".
const Llama2 = `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}`

// WithTemplate returns the shared model file rel (skipping the test where
// it is missing) with its chat template replaced by template.
func WithTemplate(t testing.TB, rel, template string) []byte {
	t.Helper()
	data, err := os.ReadFile(testshared.Path(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	src, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		if kv.Key != keyChatTemplate {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, gguf.NewKV(keyChatTemplate, template))
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, src.WriteTensors()); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// File writes WithTemplate's file into the test's temporary folder and
// returns its path.
func File(t testing.TB, rel, template string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), filepath.Base(rel))
	if err := os.WriteFile(path, WithTemplate(t, rel, template), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Template returns a real template from the shared chat-templates folder
// (testdata/chat-templates/jinja/NAME), skipping the test where it is
// missing.
func Template(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(testshared.Path(t, "testdata/chat-templates/jinja/"+name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

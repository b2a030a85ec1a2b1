package chat

import (
	"fmt"
	"slices"
	"strings"
)

// builtin is a known chat format, used for files without a template.
type builtin struct {
	name   string
	tokens []string // control tokens the vocabulary must have
	archs  []string // architectures (prefixes) that prefer this format
	source string
}

// builtins are the known formats, in the order they are tried when no
// architecture prefers one.
var builtins = []builtin{
	{
		name:   "ChatML",
		tokens: []string{"<|im_start|>", "<|im_end|>"},
		archs:  []string{"qwen"},
		source: `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`,
	},
	{
		name:   "Llama 3",
		tokens: []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
		archs:  []string{"llama"},
		source: `{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}`,
	},
	{
		name:   "Gemma",
		tokens: []string{"<start_of_turn>", "<end_of_turn>"},
		archs:  []string{"gemma"},
		source: `{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}`,
	},
	{
		name:   "Phi-3",
		tokens: []string{"<|user|>", "<|assistant|>", "<|end|>"},
		archs:  []string{"phi3"},
		source: `{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}`,
	},
	{
		name:   "Llama 2",
		tokens: []string{"[INST]", "[/INST]"},
		archs:  []string{"llama"},
		source: `{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content | trim + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% endfor %}`,
	},
}

// Builtins returns the names of the built-in formats, in the order New
// tries them.
func Builtins() []string {
	names := make([]string, len(builtins))
	for i, b := range builtins {
		names[i] = b.name
	}
	return names
}

// Builtin returns the Formatter of the built-in format called name (one of
// Builtins) with the given BOS and EOS texts.
func Builtin(name, bos, eos string) (*Formatter, error) {
	for _, b := range builtins {
		if b.name == name {
			return NewTemplate(b.name, b.source, bos, eos)
		}
	}
	return nil, fmt.Errorf("no built-in chat format %q (known: %s)", name, strings.Join(Builtins(), ", "))
}

// chooseBuiltin picks the format whose tokens v has all of: the first
// that arch prefers, else the first in order; nil when none fits.
func chooseBuiltin(arch string, v Vocab) *builtin {
	var first *builtin
	for i := range builtins {
		b := &builtins[i]
		if !hasAll(v, b.tokens) {
			continue
		}
		if slices.ContainsFunc(b.archs, func(a string) bool { return arch != "" && strings.HasPrefix(arch, a) }) {
			return b
		}
		if first == nil {
			first = b
		}
	}
	return first
}

// hasAll reports whether v has a token of each text.
func hasAll(v Vocab, texts []string) bool {
	for _, t := range texts {
		if _, ok := v.ID(t); !ok {
			return false
		}
	}
	return true
}

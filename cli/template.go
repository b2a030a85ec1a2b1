package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/tokenizer"
)

// maxJSONSize bounds the --messages and --template files.
const maxJSONSize = 64 << 20

func templateCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("template", "(--template FILE | -m FILE.gguf) --messages FILE.json [flags]", stderr)
	tmplPath := fs.String("template", "", "Jinja chat template `file`")
	modelPath := fs.String("m", "", "GGUF model `file` whose template (or built-in format) to use")
	msgPath := fs.String("messages", "", "`file` of JSON messages: [{\"role\": ..., \"content\": ...}, ...] or {\"messages\": [...]}")
	var bos, eos *string
	fs.Func("bos-token", "the bos_token `text` (default: none with --template, the model's with -m)", func(s string) error { bos = &s; return nil })
	fs.Func("eos-token", "the eos_token `text` (default: none with --template, the model's with -m)", func(s string) error { eos = &s; return nil })
	genPrompt := fs.Bool("add-generation-prompt", false, "end with the start of an assistant turn")
	var thinking *bool
	fs.Func("enable-thinking", "set enable_thinking to `true` or false (default: undefined)", func(s string) error {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		thinking = &v
		return nil
	})
	segments := fs.Bool("segments", false, "print the prompt's segments as JSON lines ({\"text\", \"special\"}) instead of its text")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case *tmplPath == "" && *modelPath == "":
		return fs.usageErr("no template given: pass --template FILE or -m FILE.gguf")
	case *tmplPath != "" && *modelPath != "":
		return fs.usageErr("--template and -m both given: pass one")
	case *msgPath == "":
		return fs.usageErr("no messages given: pass --messages FILE.json")
	}
	msgs, err := readMessages(*msgPath)
	if err != nil {
		return err
	}
	var f *chat.Formatter
	if *tmplPath != "" {
		src, err := readFlagFile("template", *tmplPath)
		if err != nil {
			return err
		}
		if f, err = chat.NewTemplate(chat.NameFromFile, string(src), deref(bos), deref(eos)); err != nil {
			return fmt.Errorf("--template %s: %w", *tmplPath, err)
		}
	} else {
		if f, err = modelFormatter(*modelPath, bos, eos); err != nil {
			return err
		}
	}
	p, err := f.Render(msgs, chat.Options{AddGenerationPrompt: *genPrompt, EnableThinking: thinking})
	if err != nil {
		return err
	}
	switch {
	case f.Mode() == chat.ModeCompletion || f.SystemRole():
		fmt.Fprintf(stderr, "template: %s\n", f.Name())
	default:
		fmt.Fprintf(stderr, "template: %s (no system role: system messages merged into the first user message)\n", f.Name())
	}
	if !p.Tracked {
		fmt.Fprintln(stderr, "template: message text could not be told apart from template text")
	}
	if !*segments {
		_, err = io.WriteString(stdout, p.Text())
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for _, s := range p.Segments {
		if err := enc.Encode(struct {
			Text    string `json:"text"`
			Special bool   `json:"special"`
		}{s.Text, s.Special}); err != nil {
			return err
		}
	}
	return nil
}

// modelFormatter is the Formatter of a GGUF model's metadata and
// vocabulary, with the BOS and EOS texts replaced where given.
func modelFormatter(path string, bos, eos *string) (*chat.Formatter, error) {
	file, err := gguf.Open(path)
	if err != nil {
		return nil, fileErr("m", err)
	}
	defer file.Close()
	tok, err := tokenizer.FromGGUF(file)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", path, err)
	}
	f, err := chat.FromGGUF(file, tok)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", path, err)
	}
	if f.Mode() == chat.ModeChat && (bos != nil || eos != nil) {
		b, e := tokText(tok, tok.BOS()), tokText(tok, tok.EOS())
		if bos != nil {
			b = *bos
		}
		if eos != nil {
			e = *eos
		}
		if f, err = chat.NewTemplate(f.Name(), f.Source(), b, e); err != nil {
			return nil, fmt.Errorf("-m %s: %w", path, err)
		}
	}
	return f, nil
}

// tokText is the text of token id, "" for none.
func tokText(tok *tokenizer.Tokenizer, id int) string {
	if id < 0 {
		return ""
	}
	return tok.Token(id)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// readMessages reads the --messages file: a JSON array of messages, or an
// object whose "messages" member is one.
func readMessages(path string) ([]chat.Message, error) {
	b, err := readFlagFile("messages", path)
	if err != nil {
		return nil, err
	}
	type message struct {
		Role    *string `json:"role"`
		Content *string `json:"content"`
	}
	var list []message
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var obj struct {
			Messages *[]message `json:"messages"`
		}
		if err = json.Unmarshal(trimmed, &obj); err == nil {
			if obj.Messages == nil {
				return nil, fmt.Errorf("--messages %s: the object has no \"messages\" array", path)
			}
			list = *obj.Messages
		}
	} else {
		err = json.Unmarshal(trimmed, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("--messages %s: not a JSON list of messages: %v", path, err)
	}
	msgs := make([]chat.Message, len(list))
	for i, m := range list {
		if m.Role == nil || *m.Role == "" {
			return nil, fmt.Errorf("--messages %s: message %d has no role", path, i)
		}
		if m.Content == nil {
			return nil, fmt.Errorf("--messages %s: message %d has no content string", path, i)
		}
		msgs[i] = chat.Message{Role: *m.Role, Content: *m.Content}
	}
	return msgs, nil
}

// readFlagFile reads the regular file path of flag name, at most
// maxJSONSize bytes.
func readFlagFile(name, path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileErr("-"+name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--%s %s is %s, not a file", name, path, fileKind(st.Mode()))
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, fileErr("-"+name, err)
	}
	defer fd.Close()
	if st, err = fd.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--%s %s: not a regular file", name, path)
	}
	b, err := io.ReadAll(io.LimitReader(fd, maxJSONSize+1))
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", name, path, err)
	}
	if len(b) > maxJSONSize {
		return nil, fmt.Errorf("--%s %s: larger than %d MiB", name, path, maxJSONSize>>20)
	}
	return b, nil
}

package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/engine"
	"kvscope/engine/gguf"
	"kvscope/engine/quant"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
	"kvscope/internal/chattest"
	"kvscope/internal/testshared"
)

// chatMLModel writes a small random Llama (engine/synth) whose last two
// tokens are renamed <|im_start|> and <|im_end|> (control tokens) and whose
// template is ChatML, and returns its path.
func chatMLModel(t *testing.T) string {
	t.Helper()
	shape := synth.Shape{Name: "ChatML test model (random weights)", Dim: 64, Layers: 2, Heads: 4, KVHeads: 2,
		FFDim: 128, Vocab: 384, Context: 2048, Type: quant.F32}
	src, err := synth.Open(shape, 7)
	if err != nil {
		t.Fatal(err)
	}
	const template = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	var kvs []gguf.KV
	for _, kv := range src.KVs {
		switch kv.Key {
		case "tokenizer.ggml.tokens":
			toks := slices.Clone(kv.Value.([]string))
			toks[shape.Vocab-2], toks[shape.Vocab-1] = "<|im_start|>", "<|im_end|>"
			kv = gguf.NewKV(kv.Key, toks)
		case "tokenizer.ggml.token_type":
			types := slices.Clone(kv.Value.([]int32))
			types[shape.Vocab-2], types[shape.Vocab-1] = tokenizer.TypeControl, tokenizer.TypeControl
			kv = gguf.NewKV(kv.Key, types)
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
	path := filepath.Join(t.TempDir(), "chatml.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// chatWith runs kvscope chat with input as its standard input (not a
// terminal: one user turn per line).
func chatWith(t *testing.T, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	old := chatInput
	chatInput = strings.NewReader(input)
	defer func() { chatInput = old }()
	return run(t, append([]string{"chat"}, args...)...)
}

var cachedLine = regexp.MustCompile(`\(cached (\d+) of (\d+) prompt tokens; (\d+) generated; ([^)]*)\)`)

// TestChatCommand drives kvscope chat with lines of input, on stories260K
// (plain completion) and on a ChatML model: each user line is a turn, each
// turn after the first reuses the history from the cache, and /reset,
// /system and unknown commands do what they say.
func TestChatCommand(t *testing.T) {
	stories := testshared.Path(t, "models/stories260K.gguf")
	chatML := chatMLModel(t)
	tests := []struct {
		name       string
		model      string
		input      string
		wantFormat string
		turns      int   // turns that ran
		reused     []int // turns (from 1) whose prompt must start with the last turn's, from the cache
		fresh      []int // turns that must start from nothing cached (the first, or a new system prompt)
		wantErr    []string
	}{
		{"plain completion", stories, "Once upon a time\nThe dog ran\nand then", "plain completion", 3, []int{2, 3}, []int{1}, nil},
		{"ChatML", chatML, "Hello there\nTell me a story\n/system Be brief.\nThe end", "from the file", 3, []int{2}, []int{1, 3}, []string{"(system prompt set)"}},
		{"reset", chatML, "Hello there\n/reset\nHello there\n/bogus\n//slash text", "from the file", 3, []int{3}, nil, []string{"(conversation cleared)", "unknown command /bogus, nothing sent"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := chatWith(t, tt.input, "-m", tt.model, "-n", "8", "--temp", "0", "--block-size", "4")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if !strings.Contains(stderr, "format "+tt.wantFormat) {
				t.Errorf("stderr does not name the format %q:\n%s", tt.wantFormat, stderr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			lines := cachedLine.FindAllStringSubmatch(stderr, -1)
			if len(lines) != tt.turns {
				t.Fatalf("%d turns reported, want %d:\n%s", len(lines), tt.turns, stderr)
			}
			if n := strings.Count(stdout, "\n"); n != tt.turns {
				t.Errorf("%d lines of replies, want %d: %q", n, tt.turns, stdout)
			}
			num := func(k, i int) int { v, _ := strconv.Atoi(lines[k-1][i]); return v }
			for _, k := range tt.reused {
				if prev := num(k-1, 2) + num(k-1, 3); num(k, 1) < prev-4 {
					t.Errorf("turn %d: %d cached, want the previous turn's %d tokens within a block of 4", k, num(k, 1), prev)
				}
			}
			for _, k := range tt.fresh {
				if num(k, 1) != 0 {
					t.Errorf("turn %d: %d cached, want 0", k, num(k, 1))
				}
			}
			if strings.Contains(stdout, "<|im_end|>") {
				t.Errorf("a reply shows <|im_end|>: %q", stdout)
			}
		})
	}
}

// TestChatKeepsTheHistoryOnInstTemplates runs the conversation,
// printf 'Once upon a time\nThe dog ran\nA cat sat\n' | kvscope chat -m
// FILE --temp 0 -n 40, on stories260K carrying Llama 2's [INST] template
// (which strips each reply and puts a space before it): turns 2 and 3 find
// the whole history in the cache, within one block, and nothing is
// re-rendered. DeepSeek R1's template writes earlier replies otherwise
// than the prompt that made them, and chat says what that costs.
func TestChatKeepsTheHistoryOnInstTemplates(t *testing.T) {
	tests := []struct {
		name     string
		template func(testing.TB) string
		rerender bool
	}{
		{"Llama 2", func(testing.TB) string { return chattest.Llama2 }, false},
		{"DeepSeek R1", func(t testing.TB) string {
			return chattest.Template(t, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja")
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := chattest.File(t, "models/stories260K.gguf", tt.template(t))
			code, stdout, stderr := chatWith(t, "Once upon a time\nThe dog ran\nA cat sat\n", "-m", path, "--temp", "0", "-n", "40")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if !strings.Contains(stderr, "format from the file") {
				t.Errorf("stderr does not name the file's template:\n%s", stderr)
			}
			rerendered := regexp.MustCompile(`\(history re-rendered: \d+ tokens? recomputed`).FindAllString(stderr, -1)
			if tt.rerender != (len(rerendered) == 2) {
				t.Errorf("%d turns said the history was re-rendered; want %v for turns 2 and 3:\n%s", len(rerendered), tt.rerender, stderr)
			}
			lines := cachedLine.FindAllStringSubmatch(stderr, -1)
			if len(lines) != 3 {
				t.Fatalf("%d turns reported, want 3:\n%s", len(lines), stderr)
			}
			if tt.rerender {
				return
			}
			block := engine.DefaultConfig().Cache.BlockSize
			num := func(k, i int) int { v, _ := strconv.Atoi(lines[k-1][i]); return v }
			for k := 2; k <= 3; k++ {
				history := num(k-1, 2) + num(k-1, 3) // the last prompt and its reply
				if num(k, 1) < history-block {
					t.Errorf("turn %d: cached %d of %d; the history before it is %d tokens: want it within a block of %d", k, num(k, 1), num(k, 2), history, block)
				}
			}
		})
	}
}

// TestChatCommandRefuses: a bad command line, a missing model and a turn
// the engine refuses each end with one line naming the cause.
func TestChatCommandRefuses(t *testing.T) {
	stories := testshared.Path(t, "models/stories260K.gguf")
	tests := []struct {
		name  string
		input string
		args  []string
		code  int
		want  string
	}{
		{"no model", "hi", nil, 1, "no model given"},
		{"missing model", "hi", []string{"-m", filepath.Join(t.TempDir(), "none.gguf")}, 1, "no such file"},
		{"bad -n", "hi", []string{"-m", stories, "-n", "0"}, 2, "want an integer from 1"},
		{"a prompt longer than the context", strings.Repeat("word ", 600) + "\nshort", []string{"-m", stories, "-n", "2", "-c", "64"}, 1, "turn 1 of 2 failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := chatWith(t, tt.input, tt.args...)
			last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
			if code != tt.code || !strings.Contains(last, tt.want) || !strings.HasPrefix(last, "kvscope chat: ") {
				t.Errorf("exit %d, stderr %q; want exit %d and a last line saying %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestChatCtrlCStopsTheReply runs kvscope chat in a child process whose
// replies never end on their own (a rolling context, no token limit to
// speak of): Ctrl-C (SIGINT) stops each reply, the chat goes on, and the
// second turn still reuses the first from the cache.
func TestChatCtrlCStopsTheReply(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	m := testshared.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "chat", "-m", m, "--overflow", "rolling", "-c", "64", "-n", "1000000", "--temp", "0", "--block-size", "4") // small blocks: the first turn fills some however early Ctrl-C comes
	cmd.Env = append(os.Environ(), "KVSCOPE_CLI_CHILD=1")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for !ok() {
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: stdout %q, stderr %q", what, stdout.String(), stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for turn, text := range []string{"Once upon a time", "The dog ran"} {
		before := len(stdout.String())
		io.WriteString(in, text+"\n")
		waitFor("the reply", func() bool { return len(stdout.String()) > before+20 })
		cmd.Process.Signal(os.Interrupt)
		waitFor("the turn's end", func() bool { return strings.Count(stderr.String(), "stopped by Ctrl-C") == turn+1 })
	}
	io.WriteString(in, "/quit\n")
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: stderr %q", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	lines := cachedLine.FindAllStringSubmatch(stderr.String(), -1)
	if len(lines) != 2 {
		t.Fatalf("%d turns reported, want 2: %q", len(lines), stderr.String())
	}
	if cached, _ := strconv.Atoi(lines[1][1]); cached == 0 {
		t.Errorf("the second turn reused nothing: %q", lines[1][0])
	}
}

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"kvscope/engine"
	"kvscope/engine/chat"
	"kvscope/engine/constrain"
	"kvscope/engine/sample"
)

// chatInput is where chat reads the user's lines: standard input, which
// tests replace.
var chatInput io.Reader = os.Stdin

// chatReplyTokens is chat's -n default.
const chatReplyTokens = 512

// chatHelp lists chat's commands.
const chatHelp = "/reset clears the conversation (the system prompt stays), /system TEXT sets the system prompt (none without TEXT), //TEXT sends TEXT starting with /, /quit or end of input leaves"

// chatCmd is kvscope chat: a conversation with the model, one user turn
// per line of input, each prompt made by chat.ConversationIDs: the history
// as the model saw it, so that the cache serves it.
func chatCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("chat", "-m FILE [--system TEXT] [-n N] [--temp T] [--seed S]", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	system := fs.String("system", "", "the system prompt `text` to start with")
	n := intFlag(fs, "n", chatReplyTokens, 1, maxTokens, "most tokens of one reply (a reply also ends at the model's end-of-turn token)")
	asJSON := fs.Bool("json", false, "constrain every reply to a JSON object")
	sampling := samplingFlags(fs)
	cfg := engine.DefaultConfig()
	addCacheFlags(fs, &cfg)
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	sp, err := sampling()
	if err != nil {
		return err
	}
	l, e, err := chatEngine(*path, *be, cfg)
	if err != nil {
		return err
	}
	defer l.close()
	defer e.Close()
	form := l.format

	interactive := isTerminal(chatInput)
	fmt.Fprintf(stderr, "chat: %s, format %s; %s\n", *path, form.Name(), l.backend)
	if interactive {
		fmt.Fprintf(stderr, "%s; Ctrl-C stops a reply.\n", chatHelp)
	}
	c := &chatSession{e: e, form: form, enc: l.tok, params: sp, max: *n, system: *system, json: *asJSON, out: bufio.NewWriter(stdout), stderr: stderr}
	defer c.out.Flush()

	lines, stop := readLines(chatInput)
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	for {
		if interactive {
			fmt.Fprint(c.out, "> ")
		}
		c.out.Flush()
		var ln line
		var ok bool
		select {
		case ln, ok = <-lines:
		case <-sigs:
			fmt.Fprintln(c.out)
			return c.result()
		}
		if !ok {
			if interactive {
				fmt.Fprintln(c.out)
			}
			return c.result()
		}
		if ln.err != nil {
			return fmt.Errorf("reading the input: %w", ln.err)
		}
		if quit := c.handle(ln.text, sigs); quit {
			return c.result()
		}
	}
}

// chatSession is a terminal conversation: its history and what it needs
// to add a turn.
type chatSession struct {
	e      *engine.Engine
	form   *chat.Formatter
	enc    chat.Encoder
	params sample.Params
	max    int
	system string
	json   bool        // replies are JSON objects (--json)
	turns  []chat.Turn // user and assistant turns, in order
	out    *bufio.Writer
	stderr io.Writer

	userTurns int   // user turns sent
	failed    []int // the user turns that failed
	firstErr  error
}

// handle acts on one line of input: a command, or a user turn. It reports
// whether the chat ends.
func (c *chatSession) handle(text string, sigs <-chan os.Signal) (quit bool) {
	text = strings.TrimSuffix(text, "\r")
	cmd, arg, _ := strings.Cut(text, " ")
	switch {
	case strings.TrimSpace(text) == "":
		return false
	case strings.HasPrefix(text, "//"):
		text = text[1:]
	case cmd == "/quit" || cmd == "/exit":
		return true
	case cmd == "/reset":
		c.turns = nil
		fmt.Fprintln(c.stderr, "(conversation cleared)")
		return false
	case cmd == "/system":
		c.system = strings.TrimSpace(arg)
		if c.system == "" {
			fmt.Fprintln(c.stderr, "(no system prompt)")
		} else {
			fmt.Fprintln(c.stderr, "(system prompt set)")
		}
		return false
	case cmd == "/help":
		fmt.Fprintln(c.stderr, chatHelp)
		return false
	case strings.HasPrefix(text, "/"):
		fmt.Fprintf(c.stderr, "(unknown command %s, nothing sent: %s)\n", cmd, chatHelp)
		return false
	}
	c.userTurns++
	if err := c.turn(text, sigs); err != nil {
		c.failed = append(c.failed, c.userTurns)
		if c.firstErr == nil {
			c.firstErr = err
		}
		fmt.Fprintf(c.stderr, "(turn %d failed, and was not added to the conversation: %s)\n", c.userTurns, firstLine(err.Error()))
	}
	return false
}

// turn sends one user message with the history and streams the reply.
// Ctrl-C (a signal on sigs) stops the reply, which stays in the
// conversation as far as it got.
func (c *chatSession) turn(text string, sigs <-chan os.Signal) error {
	turns := conversation(c.system, c.turns, chat.Turn{Role: "user", Content: text})
	ids, reuse, err := c.form.ConversationIDs(turns, chat.Options{AddGenerationPrompt: true}, c.enc, true)
	if err != nil {
		return err
	}
	if reuse.Recomputed > 0 {
		fmt.Fprintf(c.stderr, "(history re-rendered: %s recomputed; the chat template rewrote an earlier turn)\n", engine.Count(reuse.Recomputed, "token"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := engine.Request{Tokens: ids, Sampling: &c.params, MaxTokens: c.max, Label: fmt.Sprintf("chat turn %d", c.userTurns)}
	if c.json {
		req.Constraint = constrain.JSON(true)
	}
	s, err := c.e.Submit(ctx, req)
	if err != nil {
		return err
	}
	var reply strings.Builder
	gen := []int{} // not nil: a reply the model ended at once still has its End
	var final engine.Chunk
	stopped := false
	for done := false; !done; {
		select {
		case ch, ok := <-s.C:
			if !ok {
				done = true
				break
			}
			if ch.Done {
				final = ch
				continue
			}
			gen = append(gen, ch.Token)
			reply.WriteString(ch.Text)
			c.out.WriteString(ch.Text)
			c.out.Flush()
		case <-sigs:
			stopped = true
			cancel()
		}
	}
	fmt.Fprintln(c.out)
	c.out.Flush()
	if final.Reason == engine.FinishError {
		return final.Err
	}
	c.turns = append(c.turns, chat.Turn{Role: "user", Content: text}, chat.Turn{Role: "assistant", Content: reply.String(), IDs: gen, End: final.End})
	why := string(final.Reason)
	switch {
	case stopped || final.Reason == engine.FinishCancelled:
		why = "stopped by Ctrl-C"
	case final.Reason == engine.FinishLength && final.Err != nil:
		why = "the context is full: /reset to start over"
	case final.Reason == engine.FinishLength:
		why = fmt.Sprintf("the reply reached -n %d tokens", c.max)
	case final.Reason == engine.FinishStop:
		why = "end of turn"
	}
	fmt.Fprintf(c.stderr, "(cached %d of %d prompt tokens; %d generated; %s)\n", final.CachedTokens, final.PromptTokens, final.Generated, why)
	return nil
}

// conversation is the conversation to render: the system prompt (if any), the
// history, and the new turn.
func conversation(system string, history []chat.Turn, next chat.Turn) []chat.Turn {
	turns := make([]chat.Turn, 0, len(history)+2)
	if system != "" {
		turns = append(turns, chat.Turn{Role: "system", Content: system})
	}
	turns = append(turns, history...)
	return append(turns, next)
}

// result is the chat's outcome: nil, or which user turns failed.
func (c *chatSession) result() error {
	switch len(c.failed) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("turn %d of %d failed: %w", c.failed[0], c.userTurns, c.firstErr)
	}
	return fmt.Errorf("%d of %d turns failed; turn %d: %w", len(c.failed), c.userTurns, c.failed[0], c.firstErr)
}

// line is one line of input, or the error that ended the input.
type line struct {
	text string
	err  error
}

// readLines reads r line by line (of any length; a last line without a
// newline counts) on a goroutine, so that the chat can wait for a line and
// for Ctrl-C at once. stop ends the goroutine once its read returns.
func readLines(r io.Reader) (<-chan line, func()) {
	c := make(chan line)
	done := make(chan struct{})
	go func() {
		defer close(c)
		br := bufio.NewReader(r)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				select {
				case c <- line{text: strings.TrimSuffix(s, "\n")}:
				case <-done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					select {
					case c <- line{err: err}:
					case <-done:
					}
				}
				return
			}
		}
	}()
	return c, func() { close(done) }
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && st.Mode()&os.ModeNamedPipe == 0
}

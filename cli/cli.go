package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// Command is one subcommand.
type Command struct {
	Name  string
	Short string // one line for the usage text
	Run   func(args []string, stdout, stderr io.Writer) error
}

// Commands lists the headless subcommands in the order the usage shows them.
var Commands = []Command{
	{"run", "generate text from a prompt", runCmd},
	{"info", "describe a GGUF model", infoCmd},
	{"tokenize", "print a text's token ids as JSON", tokenizeCmd},
	{"template", "render a chat template on JSON messages", templateCmd},
	{"perplexity", "measure perplexity over a text file", perplexityCmd},
	{"logits", "write teacher-forced logits of a file of token ids (float32, one row per id)", logitsCmd},
	{"serve", "serve an OpenAI-compatible API, Prometheus metrics and the cache's snapshots and events over HTTP", serveCmd},
	{"chat", "chat in the terminal (or one user turn per line of standard input), reusing the cache across turns", chatCmd},
	{"gen-model", "write a GGUF of a real model's shape with random weights", genModelCmd},
	{"bench", "measure the cache (bench cache) and prefill and decode speed (bench speed)", benchCmd},
	{"models", "list the GGUF models on this machine (--catalog: small chat models to download)", modelsCmd},
	{"pull", "download a GGUF model from the Hugging Face hub, resuming an interrupted one", pullCmd},
	{"watch", "print vLLM instances' prefix-cache figures from their KV-cache events and /metrics (--once: the totals, then exit)", watchCmd},
	{"version", "print the version, commit, Go version, native library and which backends load", versionCmd},
}

// Main runs the subcommand named by args[0] and returns the process exit
// code: 0 on success, 2 for a bad command line, 1 for other errors. Every
// failure prints exactly one line on stderr, naming its cause.
func Main(args []string, stdout, stderr io.Writer) (code int) {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "kvscope: no command given (run 'kvscope help' for the list)")
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		Usage(stderr)
		return 0
	}
	if args[0] == "--version" || args[0] == "-V" {
		args = append([]string{"version"}, args[1:]...)
	}
	var cmd *Command
	for i := range Commands {
		if Commands[i].Name == args[0] {
			cmd = &Commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "kvscope: unknown command %q (run 'kvscope help' for the list)\n", args[0])
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "kvscope %s: internal error: %s\n", cmd.Name, firstLine(fmt.Sprint(r)))
			code = 1
		}
	}()
	err := cmd.Run(args[1:], stdout, stderr)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "kvscope %s: %s\n", cmd.Name, firstLine(err.Error()))
	if _, ok := errors.AsType[*usageError](err); ok {
		return 2
	}
	return 1
}

// firstLine is s up to its first line break: an error's message without
// the stack trace or detail some errors carry after it.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}

// Usage prints the list of commands.
func Usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kvscope [command] [flags]")
	fmt.Fprintln(w, "\nWith no command, kvscope opens its window. Commands:")
	for _, c := range Commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.Name, c.Short)
	}
	fmt.Fprintln(w, "\nRun 'kvscope COMMAND -h' for a command's flags.")
}

// requireModel checks that the -m flag was given; opening the file says
// what else is wrong with it.
func requireModel(path string) error {
	if path == "" {
		return fmt.Errorf("no model given: pass -m FILE.gguf")
	}
	return nil
}

// fileErr turns an error of os.Stat or os.Open on the file of flag name
// into "-name PATH: what went wrong"; other errors (which name the file
// themselves) pass unchanged.
func fileErr(name string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok && (pe.Op == "stat" || pe.Op == "open") {
		return fmt.Errorf("-%s %s: %w", name, pe.Path, pe.Err)
	}
	return err
}

// readText reads the text file of flag -f, refusing what is not a regular
// file (a named pipe would block for ever) or is larger than maxTextSize.
func readText(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("no text file given: pass -f FILE")
	}
	fd, err := openRegular(path)
	if err != nil {
		return "", err
	}
	defer fd.Close()
	b, err := io.ReadAll(io.LimitReader(fd, maxTextSize+1))
	if err != nil {
		return "", fmt.Errorf("-f %s: %w", path, err)
	}
	if len(b) > maxTextSize {
		return "", fmt.Errorf("-f %s: the text is larger than %d MiB", path, maxTextSize>>20)
	}
	return string(b), nil
}

// openRegular opens path for reading if it is a regular file, checking
// before the open (which blocks on a named pipe) and after it.
func openRegular(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileErr("f", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("-f %s is %s, not a text file", path, fileKind(st.Mode()))
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, fileErr("f", err)
	}
	if st, err = fd.Stat(); err != nil || !st.Mode().IsRegular() {
		fd.Close()
		return nil, fmt.Errorf("-f %s: not a regular file", path)
	}
	return fd, nil
}

// fileKind names a non-regular file mode.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

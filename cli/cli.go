package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
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
	{"perplexity", "measure perplexity over a text file", perplexityCmd},
	{"bench", "measure the cache (bench cache) and decode speed (bench decode)", benchCmd},
}

// errUsage marks an error caused by the command line; the flag set has
// already printed its usage.
var errUsage = errors.New("usage error")

// Main runs the subcommand named by args[0] and returns the process exit
// code: 0 on success, 2 for a bad command line, 1 for other errors.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		Usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range Commands {
		if c.Name == args[0] {
			err := c.Run(args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			}
			fmt.Fprintf(stderr, "kvscope %s: %v\n", c.Name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "kvscope: unknown command %q\n", args[0])
	Usage(stderr)
	return 2
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

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, args string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: kvscope %s %s\n", name, args)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, turning flag errors into errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// requireModel checks the -m flag.
func requireModel(path string) error {
	if path == "" {
		return fmt.Errorf("no model given: pass -m FILE.gguf")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("model file: %w", err)
	}
	return nil
}

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

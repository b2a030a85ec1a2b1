// Command kvscope chats with local GGUF language models and shows the KV
// cache at work. With no command it opens its window (optionally on a model
// given with -m); commands (run, info, tokenize, perplexity, version) work
// headless, as do --version and -V.
package main

import (
	_ "early" // before Fyne initializes: a quiet C.UTF-8 locale
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"kvscope/app"
	"kvscope/cli"
)

// fyneApp is FyneApp.toml, the app's metadata (version and build number
// among them), built in so that `kvscope version` works wherever the
// binary is.
//
//go:embed FyneApp.toml
var fyneApp []byte

func main() {
	cli.AppMetadata = fyneApp
	args := os.Args[1:]
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-h" || args[0] == "--help" || args[0] == "--version" || args[0] == "-V") {
		os.Exit(cli.Main(args, os.Stdout, os.Stderr))
	}
	fs := flag.NewFlagSet("kvscope", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // one line of our own, not the usage
	model := fs.String("m", "", "GGUF model `file` to open")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(os.Stderr, "kvscope: %v (run 'kvscope help' for the commands)\n", err)
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "kvscope: unexpected argument %q after the window's flags (run 'kvscope help' for the commands)\n", fs.Arg(0))
		os.Exit(2)
	}
	app.Run(*model)
}

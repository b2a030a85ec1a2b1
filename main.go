// Command kvscope chats with local GGUF language models and shows the KV
// cache at work. With no command it opens its window (optionally on a model
// given with -m); commands (run, info, tokenize, perplexity) work headless.
package main

import (
	"flag"
	"os"
	"strings"

	"kvscope/app"
	"kvscope/cli"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-h" || args[0] == "--help") {
		os.Exit(cli.Main(args, os.Stdout, os.Stderr))
	}
	fs := flag.NewFlagSet("kvscope", flag.ExitOnError)
	model := fs.String("m", "", "GGUF model `file` to open")
	fs.Usage = func() { cli.Usage(fs.Output()); fs.PrintDefaults() }
	fs.Parse(args)
	app.Run(*model)
}

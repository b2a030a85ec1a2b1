// Command kvscope chats with local GGUF language models and shows the KV
// cache at work. With no arguments it opens its window; subcommands (run,
// info, tokenize, perplexity) work headless.
package main

import (
	"os"

	"kvscope/app"
	"kvscope/cli"
)

func main() {
	if len(os.Args) < 2 {
		app.Run()
		return
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Package cli implements kvscope's headless subcommands (run, info,
// tokenize, perplexity): flag parsing, output formats and error messages,
// on top of the engine packages.
package cli

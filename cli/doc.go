// Package cli implements kvscope's headless subcommands (run, chat, info,
// tokenize, template, perplexity, logits, gen-model, bench, models, pull,
// serve, watch, version):
// flag parsing, output formats and error messages, on top of the engine
// packages.
//
// Every flag is checked when it is parsed, before any work: a value outside
// its range (each count has an upper bound far below what would overflow
// the arithmetic it feeds) is refused, never reinterpreted. Every failure
// exits non-zero (2 for a bad command line, 1 otherwise) with exactly one
// line on stderr naming its cause; a run of several prompts fails when any
// of them does.
package cli

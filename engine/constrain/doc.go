// Package constrain provides constrained decoding: automata that accept only
// valid output (any JSON value or object, a JSON Schema, one of fixed
// strings, a regular expression) and the per-step token masks they allow
// over a tokenizer's vocabulary.
//
// # Grammars
//
// Every constraint compiles to one byte-level context-free grammar: rules
// of alternatives, each a sequence of byte classes and rule references.
// The JSON grammar follows the shape llama.cpp's json_schema_to_grammar
// writes (objects, arrays, strings with escapes and UTF-8, numbers with
// bounded digit counts, whitespace of at most one space or a newline and
// 20 indentation characters), and a schema compiles the subset llama.cpp
// covers: type (one or a list), properties in their written order,
// required, additionalProperties (false unless given, when properties are),
// enum, const, anyOf and oneOf, local $ref (#/$defs/..., #/definitions/...),
// items, prefixItems, minItems, maxItems, minLength, maxLength, pattern and
// the formats date, time, date-time and uuid. Keywords that constrain a
// value in a way the grammar cannot (minimum, multipleOf, allOf of more
// than one schema, not, uniqueItems, ...) are refused with their name, never
// ignored; so is a keyword beside one that decides the value alone ($ref,
// const, enum, anyOf, oneOf, allOf: only type may stand beside const and
// enum, filtering their values) and a string's minLength or maxLength
// beside its pattern or format. Annotations (title, description, default,
// $defs ...) may stand anywhere. Schemas are first checked with
// github.com/santhosh-tekuri/jsonschema/v6, whose loader follows no
// reference out of the schema (no file, no web address). A regular expression is parsed
// by regexp/syntax and must match the whole output; a choice is an
// alternative of literal strings.
//
// # Running a grammar
//
// A parse position is a set of stacks, as in llama.cpp's grammar sampler:
// each stack is a list of positions in the rules, its top a byte class
// still to match. Stack nodes are interned, so a set of stacks is a sorted
// list of node ids, and sets are interned too: a State is one id, and the
// transition of a State on a byte is computed once and then read from a
// table. The automaton is thus a deterministic one over the pushdown's
// configurations, built lazily; a schema's, a regular expression's and a
// composed grammar's are built at compile, breadth first, up to 4096
// states (a bounded string has a state per character and more within its
// multi-byte characters, which a first mask would otherwise build by the
// hundred), and any JSON value's as the output goes.
//
// # Token masks
//
// A Vocab splits the tokenizer's vocabulary in two: plain text (printable
// ASCII but the quote and the backslash: most of a real vocabulary) and
// the rest (a few thousand tokens). Where a State's plain run (the bytes
// that all lead to one live state, such as a string's characters) takes
// every text byte for as far as the longest text token, or as far as a
// bound beyond which no text byte may follow (a string's maxLength), the
// text tokens are marked by length from bitmaps a word at a time, and
// only a trie of the rest is walked; elsewhere the walk is over a trie of
// all tokens. A walk goes depth first from the State, stepping the
// automaton one byte per trie edge and dropping a subtree as soon as its
// prefix is dead. Each trie node keeps a summary of the bytes below it,
// and a subtree whose bytes all follow the run, or whose bytes are valid
// UTF-8 text with its ASCII in the run where every character leads back
// along it (the inside of a JSON string), is marked whole: its tokens lie
// in trie order, so that it is a run of bits in a bitmap, moved to token
// ids at the end (adding the tokens in, or all of them and taking those
// out, whichever are fewer). The masks of recent States are kept, within
// 4 MiB per Grammar, the least recently used let go first. Allowed is
// checked against feeding each token to the matcher, on hand-made, GPT-2
// and generated vocabularies and grammars. BenchmarkAllowed and
// BenchmarkSampleStep measure a step on a 128k-token vocabulary, and
// kvscope bench sample its CPU time.
//
// End of generation is the caller's: a Matcher says when its output is a
// complete match (Accepting: end-of-generation tokens may be allowed) and
// when nothing can follow (Done: the output is finished).
package constrain

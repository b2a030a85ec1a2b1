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
// table. The automaton is thus a lazily built deterministic one over the
// pushdown's configurations, and a string's characters, say, cost a table
// look-up each after the first time.
//
// # Token masks
//
// A Vocab is a trie of the token byte strings, each node's children side
// by side in memory. Allowed walks the trie depth first from the current
// State, stepping the automaton one byte per trie edge and dropping a
// subtree as soon as its prefix is dead. Most of a step's tokens are
// marked without a walk: each trie node keeps a summary of the bytes
// below it, each State its plain run (the bytes that all lead to one
// live state, such as a string's characters), and a subtree whose bytes
// all follow the run, or whose bytes are valid UTF-8 text with its ASCII
// in the run where every character leads back to the State (the inside
// of a JSON string), is marked whole from a list of its tokens. The masks
// of the latest States are kept. BenchmarkAllowed and BenchmarkSampleStep
// measure a step on a 128k-token vocabulary.
//
// End of generation is the caller's: a Matcher says when its output is a
// complete match (Accepting: end-of-generation tokens may be allowed) and
// when nothing can follow (Done: the output is finished).
package constrain

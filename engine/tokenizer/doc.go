// Package tokenizer provides the SentencePiece-style ("llama") and
// byte-level BPE ("gpt2") tokenizers described by a GGUF file's
// tokenizer.ggml.* metadata, matching llama.cpp's llama-vocab.cpp token for
// token, and a streaming detokenizer. The same tokenizers also load from a
// Hugging Face tokenizer.json (BPE with a ByteLevel or a Metaspace /
// byte-fallback decoder; LoadHFJSON), for decoding a served model's token
// ids where only that file is at hand (hfjson.go says what its encoding
// covers).
//
// # Encoding
//
// Encode first splits special tokens out of the text (user-defined tokens
// always, control tokens only with parseSpecial), longest first, as
// llama.cpp's tokenizer_st_partition does. Each remaining piece of text is
// then tokenized:
//
//   - SPM: spaces become "▁", a space is put in front of text that starts
//     the input or follows a special token (tokenizer.ggml.add_space_prefix,
//     default true), and adjacent symbols merge, highest token score first
//     (leftmost on ties), starting from single characters. Characters that
//     end up as no token are spelled in <0xNN> byte tokens (or <unk> when the
//     vocabulary has none).
//   - BPE: a pre-tokenizer chosen by tokenizer.ggml.pre cuts the text into
//     words, each word's bytes are written in GPT-2's byte alphabet, and
//     merges run inside each word, lowest rank first (leftmost on ties).
//
// Input that is not valid UTF-8 is tokenized as llama.cpp does: the BPE
// pre-tokenizer reads each bad byte as U+FFFD, and SPM spells it in byte
// tokens, so only valid UTF-8 is sure to come back unchanged from Decode.
//
// Both merge loops use a priority queue, and the vocabulary and merge
// ranks are hash maps built once in New, so a 150,000-token vocabulary
// costs nothing per call beyond map lookups.
//
// # Pre-tokenizers
//
// llama.cpp has hand-written splitters for the GPT-2 and Llama 3 patterns;
// we port those (splitGPT2, splitLlama3) because llama.cpp's results, not the
// regular expressions', are what must match. The other patterns (Qwen 2, the
// "default" BPE steps, DeepSeek, StarCoder) llama.cpp runs on std::regex,
// which backtracks: [\s]+\z or \s*[\r\n]+ costs time quadratic in a run of
// spaces. We write each as a matcher that tries the pattern's alternatives
// in order, as a backtracking engine does, but looks at each code point a
// bounded number of times, so every pre-tokenizer takes time linear in its
// input. A test
// checks the matchers against the patterns run by a backtracking engine
// (github.com/dlclark/regexp2, used only there) on random text. Like
// llama.cpp, patterns that use \p{L}, \p{N} ... run over "collapsed" text
// in which each non-ASCII code point stands as one character per Unicode
// category, so the patterns only need ASCII classes; \s is ASCII whitespace,
// as std::regex reads it. Code point categories come from Go's unicode
// package (llama.cpp generates the same categories from UnicodeData.txt).
//
// # End of generation
//
// IsEOG tells the engine where a reply ends, as llama.cpp's vocabulary
// loader decides it: EOS, EOT and EOM, the fill-in-the-middle pad, repo and
// file-separator ids the metadata names, and every token whose text is one
// of a known list (<|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn>,
// <|end|>, <|endoftext|>, <|end_of_text|>, <|return|>, <|call|>, <EOT>,
// [EOS], <eos>, ...), whatever type the file gives it. Those tokens become
// control tokens, so that text never spells them without parseSpecial and
// Decode never shows them. Two exceptions follow llama.cpp: <|end|> ends a
// message, not generation, beside <|return|> and <|call|> (gpt-oss) or
// <|call|>/<|calls|> and <|flush|> (solar-open), and is rendered; and </s>
// is ordinary text beside <|tool_response> (Gemma 4). When the metadata
// names no EOT, the first of the end-of-turn texts the vocabulary has is
// EOT.
//
// User-defined tokens (type 4, such as added <tool_call> tokens) are found
// in text whether or not parseSpecial is set, as llama.cpp and Hugging
// Face's tokenizers do; only control tokens need it. Decode shows them. A
// user-defined token whose text is an end-of-generation text becomes a
// control token, as in llama.cpp: phi-3's user-defined </s> typed as text
// stays "</", "s", ">" without parseSpecial. As llama.cpp does by model
// (the file does not say), a model whose general.name holds "phi-3" or
// "phi3" drops the white space after each special token but <s>, <unk>
// and <|endoftext|> (so "<|user|>\nHi" encodes as "<|user|>Hi"), and the
// mask token of Jina v2, Nomic and Jina BERT and ModernBERT models drops
// the white space before it. testdata/userdefined.json holds llama.cpp's
// ids for such texts on SPM and BPE vocabularies.
//
// # Decoding
//
// Piece shows a token's bytes with control tokens as text. Decode joins
// pieces and leaves control and unknown tokens out (llama.cpp's detokenize
// with special=false). A Decoder does the same one id at a time and never
// returns part of a UTF-8 character. For SPM vocabularies with a space
// prefix, the prefix Encode added is removed again: Decode drops the first
// piece's leading space (after BOS, if the ids start with one); a Decoder
// drops it only when the stream starts with BOS, because a stream without
// BOS continues earlier text (generated tokens after a prompt) and its first
// space is real. Unlike llama.cpp's detokenize, neither applies the BPE
// "clean up tokenization spaces" rules, which are lossy.
//
// # Differences from llama.cpp
//
// Where llama.cpp would abort or throw, New and Encode do not: a missing
// byte token falls back to <unk> (or is dropped without one). llama.cpp picks
// the end-of-turn token by text in hash-map order when the metadata names
// none; we prefer the texts in a fixed order (<|eot_id|>, <|im_end|>, ...).
// A code point
// of a BPE token that is outside GPT-2's byte alphabet renders as
// [UNK_BYTE_0x..], without the token's whole text that llama.cpp appends to
// each such code point (which costs n² bytes for n of them).
package tokenizer

// Package chat provides the prompt of a conversation for a model: its GGUF
// chat template rendered by a real Jinja engine (or a known format chosen from
// the vocabulary when the file has none, or plain completion), as segments
// that tell template text from message text.
//
// # Rendering
//
// Templates run on github.com/ardanlabs/jinja, with trim_blocks and
// lstrip_blocks on, as Hugging Face's transformers sets them. That engine's
// own whitespace control reaches past adjacent tags, so it is done
// beforehand, as Jinja2 does it, by rewriting the template (see guard.go).
// The variables are those templates expect: messages (each with role and
// content), add_generation_prompt, bos_token, eos_token, raise_exception (an
// error that carries the template's message), strftime_now (formatting the
// time of Options.Now) and, when Options.EnableThinking is set,
// enable_thinking (Qwen 3-style templates read it).
//
// A template from a file is untrusted input, and the engine has no limits of
// its own: it parses and evaluates by recursion, and a Go stack overflow
// kills the process. So templates deeper than a few dozen blocks or
// brackets, or larger than a few MiB, are refused; macro bodies are wrapped
// in calls that count the macros in progress and stop a runaway recursion
// with an error; range makes at most about a million numbers per rendering;
// and a rendering that runs past a time limit is given up with an error (its
// goroutine runs on until the engine returns). Every failure is one error,
// never a panic.
//
// Two rules of llama.cpp follow: a BOS text at the very start and an EOS text
// at the very end of a rendering are cut off (the tokenizer adds BOS itself),
// and where a template drops or rejects the system role, system messages are
// merged into the first user message, joined by a newline. Whether a template
// keeps the system role is found once by a trial render with a probe system
// message, as minja's polyfill does: a template that raises, or whose output
// lacks the probe's text, does not keep it.
//
// # Segments
//
// A prompt is meant to be tokenized with special-token parsing on for the
// template's text and off for the messages' text, so that a user who types
// "<|im_end|>" gets those characters, not the control token. Render therefore
// returns segments marked Special (template text) or not (message text). It
// renders twice: once as is, which gives the text, and once with every
// message's content wrapped in private-use marker characters, placed inside
// the content's leading and trailing white space so that trim and strip still
// see the same white space. Where the marked rendering, with its markers
// removed, equals the plain one, the markers give the segments exactly; a
// content the template cut (such as content.split('</think>')[-1]) keeps
// only one marker, and the text beside it that matches the content's end (or
// start) is message text. Where the two renderings differ (a template that
// compares or measures content), the prompt is one Special segment, as
// llama.cpp tokenizes it, and Prompt.Tracked is false.
//
// Tokenize encodes a prompt so: control tokens are found in template text
// only, and the text between them is encoded as one piece across segment
// boundaries, so that where no message holds control-token text the ids
// are exactly llama.cpp's for the rendered text.
//
// # Conversations and the prefix cache
//
// A chat sends the whole conversation again each turn, and the engine's
// prefix cache serves the part it has seen, block by block, as long as the
// new prompt's ids start with the old ones. Tokenizing the rendering again
// need not give the ids the model read and wrote (a word it spelled in
// pieces comes back whole; a template that trims a reply or puts a space
// before it makes SentencePiece merge that space into another token), so
// ConversationIDs keeps the conversation as the model saw it: each earlier
// prompt's ids as computed, each reply's generated ids (Turn.IDs) and the
// end-of-generation token it ended on (Turn.End), and after them only the
// tokens of what the next rendering adds. The next prompt then starts with
// exactly the previous prompt and reply, and only the end-of-turn text, the
// new message and the template around it are computed. Where a template
// rewrites an earlier turn (as reasoning templates that drop a reply's
// thinking do), the renderings stop extending each other, the prompt is
// tokenized afresh from there, and Reuse.Recomputed says how many history
// ids that cost. For plain completion, the prompt is the app's plain
// conversation text (the system prompt and a blank line, each user
// message on a new line, each reply continuing its message).
//
// # Without a template
//
// A file with no tokenizer.chat_template gets a built-in template chosen by
// its architecture and the control tokens its vocabulary has: ChatML
// (<|im_start|>), Llama 3 (<|start_header_id|>), Gemma (<start_of_turn>),
// Phi-3 (<|user|> and <|end|>) or Llama 2 ([INST]). A model with none of them
// (such as a base model like stories260K) is plain completion: the prompt is
// the messages' text, joined. Formatter.Name says which was chosen, and Plain
// gives plain completion for any model.
package chat

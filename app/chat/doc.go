// Package chat provides kvscope's chat pane: the conversations sidebar, the
// streamed messages with their speed, the composer, stop, regenerate and
// edit-and-resend, per-conversation system prompt and sampling settings and
// a context-usage bar, with every conversation generating on the engine at
// once and saved through package store.
//
// A conversation talks to the model through its chat template (package
// kvscope/engine/chat chooses it: the file's, or one the vocabulary calls
// for), or, for a model without one or by the conversation's choice, as
// plain completion: the model continues one text made of the system
// prompt and the messages in turn (see Prompt). The pane says which, and a
// per-conversation switch sets enable_thinking for templates that read it.
//
// Prompts go to the engine as token ids (see Prompter): special tokens
// come from the template's text only, so a user who types "<|im_end|>"
// sends those characters. Each reply keeps the ids the model generated,
// and the next prompt holds them as they are, so that it starts with
// exactly the ids the prefix cache holds for the turns before; the reply's
// footer says how many prompt tokens the cache served. Prompts are made
// off the UI goroutine (a template's rendering may take a while), and so
// is the context bar's count of a conversation's tokens.
//
// The pane is split by concern: its layout and the conversations' state
// (pane.go, with message.go, settings.go and modebar.go for their
// widgets), the saver (saver.go), and the replies (reply.go), each run by
// package app/chat/turn, which makes the prompt, submits it, streams it,
// stops it and says how it ended with no Fyne import; reply.go hands its
// reports to the widgets on the UI goroutine.
package chat

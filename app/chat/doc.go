// Package chat provides kvscope's chat pane: the conversations sidebar, the
// streamed messages with their speed, the composer, stop, regenerate and
// edit-and-resend, per-conversation system prompt and sampling settings and
// a context-usage bar, with every conversation generating on the engine at
// once and saved through package store.
//
// Until kvscope renders chat templates (a Jinja engine comes later), a
// conversation is plain completion: the model continues one text made of
// the system prompt and the messages in turn (see Prompt), and the pane
// says so.
package chat

// This file holds a conversation's plain-text prompt, its title and its
// name in the list.

package chat

import (
	"fmt"
	"strings"

	"kvscope/app/store"
)

// Prompt returns the plain-completion text for generating the reply at
// message index upTo of c (the messages before it are the context): the
// system prompt and a blank line, then the messages, each user message on
// a new line after the one before, and each reply continuing its user
// message's text directly (a story model continues the user's sentence).
// Regenerating a reply sends the same text again, so the prefix cache
// serves every full block of it.
func Prompt(c store.Conversation, upTo int) string {
	var b strings.Builder
	if s := strings.TrimSpace(c.System); s != "" {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	upTo = min(upTo, len(c.Messages))
	for i, m := range c.Messages[:upTo] {
		if m.Role == "user" && i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

// Title makes a conversation title from its first message: the first few
// words, at most about 40 characters.
func Title(text string) string {
	words := strings.Fields(text)
	var b strings.Builder
	for _, w := range words {
		if b.Len()+len(w) > 40 {
			b.WriteString("…")
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	if b.Len() == 0 {
		return "New chat"
	}
	return b.String()
}

// Name is a conversation's one name, used wherever it shows (the
// inspector's legend and details, the engine's event log): "conversation
// 3 “Once upon a time”". Its request and sequence ids are details.
func Name(c store.Conversation) string {
	return fmt.Sprintf("conversation %d “%s”", c.ID, c.Title)
}

package chat_test

import (
	"fmt"

	"kvscope/app/chat"
	"kvscope/app/store"
)

// Without a chat template, a conversation is one text the model continues.
func ExamplePrompt() {
	c := store.Conversation{System: "Stories for children.", Messages: []store.Message{
		{Role: "user", Text: "Once upon a time"},
		{Role: "assistant", Text: " there was a cat."},
		{Role: "user", Text: "The cat"},
		{Role: "assistant"}, // the reply to generate
	}}
	fmt.Printf("%q\n", chat.Prompt(c, 3))
	// Output:
	// "Stories for children.\n\nOnce upon a time there was a cat.\nThe cat"
}

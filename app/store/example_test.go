package store_test

import (
	"fmt"
	"os"

	"kvscope/app/store"
)

// Conversations survive a restart: save, then load in a new Store.
func ExampleStore_SaveConversations() {
	dir, _ := os.MkdirTemp("", "kvscope-store")
	defer os.RemoveAll(dir)

	s, _ := store.Open(dir)
	s.SaveConversations(store.Conversations{List: []store.Conversation{
		{ID: 1, Title: "Stories", Draft: "Once upon a", Sampling: store.DefaultSampling()},
	}})

	again, _ := store.Open(dir)
	c, _ := again.LoadConversations()
	fmt.Printf("%s: draft %q\n", c.List[0].Title, c.List[0].Draft)
	// Output:
	// Stories: draft "Once upon a"
}

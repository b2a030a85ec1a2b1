package inspector_test

import (
	"fmt"

	"kvscope/app/inspector"
	"kvscope/engine/kvcache"
)

// Render draws a pool into an image; the grid says where each block went.
// Here two sequences share a prompt block, and ref-count mode shows it.
func ExampleRender() {
	m, _ := kvcache.New(kvcache.Config{BlockSize: 4, BlockBytes: 64, Budget: 8 * 64}, nil)
	m.Allocate(1, []int32{1, 2, 3, 4, 5}, kvcache.SeqOptions{}) // blocks 0 (full) and 1
	m.Commit(1, 5)
	m.Allocate(2, []int32{1, 2, 3, 4, 9}, kvcache.SeqOptions{}) // reuses block 0

	img, grid := inspector.Image(m.Snapshot(), inspector.View{Mode: inspector.ByRefCount}, 80, 40)
	for _, block := range []int{0, 1, 2, 3} {
		c := grid.Center(block)
		switch img.RGBAAt(c.X, c.Y) {
		case inspector.RefColor(2):
			fmt.Printf("block %d: shared by 2\n", block)
		case inspector.RefColor(1):
			fmt.Printf("block %d: private\n", block)
		case inspector.FreeColor:
			fmt.Printf("block %d: free\n", block)
		}
	}
	// Output:
	// block 0: shared by 2
	// block 1: private
	// block 2: private
	// block 3: free
}

// Describe turns a cache event into a line for the event log.
func ExampleDescribe() {
	e := kvcache.Event{Step: 12, Kind: kvcache.EventPreempt, Seq: 3, Tokens: 120, Reason: "recompute"}
	fmt.Println(inspector.Describe(e, nil, func(id kvcache.SeqID) string { return fmt.Sprintf("conversation %d", id) }))
	// Output:
	// step 12: conversation 3 preempted (recompute): no free block; its 120 tokens will be computed again
}

package engine_test

import (
	"context"
	"fmt"

	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/synth"
	"kvscope/engine/tokenizer"
)

// demo loads the built-in demo model (random weights, made in memory).
func demo() (*model.Model, *tokenizer.Tokenizer) {
	f, err := synth.Open(synth.Demo, 1)
	if err != nil {
		panic(err)
	}
	m, err := model.New(f)
	if err != nil {
		panic(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		panic(err)
	}
	return m, tok
}

// Submit a request and read its stream to the end.
func Example() {
	m, tok := demo()
	e, err := engine.New(m, tok, engine.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer e.Close()

	s, err := e.Submit(context.Background(), engine.Request{Prompt: "Once upon a time", MaxTokens: 8, IgnoreEOS: true})
	if err != nil {
		panic(err)
	}
	tokens := 0
	for c := range s.C {
		if c.Done {
			fmt.Println("finished:", c.Reason, "after", c.Generated, "tokens")
		} else {
			tokens++
		}
	}
	fmt.Println("streamed", tokens, "tokens")
	// Output:
	// finished: length after 8 tokens
	// streamed 8 tokens
}

// Run two requests at once that share a prompt: the second reuses the
// first's cached blocks.
func ExampleEngine_Snapshot() {
	m, tok := demo()
	e, _ := engine.New(m, tok, engine.DefaultConfig())
	defer e.Close()

	prompt := make([]int, 40)
	for i := range prompt {
		prompt[i] = 300 + i
	}
	first, _ := e.Submit(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 4, IgnoreEOS: true})
	first.Collect()
	second, _ := e.Submit(context.Background(), engine.Request{Tokens: prompt, MaxTokens: 4, IgnoreEOS: true})
	_, finals := second.Collect()
	fmt.Println("prompt tokens reused:", finals[0].CachedTokens)

	snap := e.Snapshot()
	fmt.Println("block size:", snap.Cache.BlockSize, "K/V:", snap.Config.Cache.K, snap.Config.Cache.V)
	// Output:
	// prompt tokens reused: 32
	// block size: 16 K/V: f16 f16
}

// Reconfigure the cache while the engine runs: a new block size rebuilds the
// pool, and running requests resume by recomputation.
func ExampleEngine_Reconfigure() {
	m, tok := demo()
	e, _ := engine.New(m, tok, engine.DefaultConfig())
	defer e.Close()

	c := e.Config()
	c.Cache.BlockSize = 32
	if err := e.Reconfigure(c); err != nil {
		fmt.Println(err)
	}
	c.Cache.BlockSize = 1000
	fmt.Println(e.Reconfigure(c))
	// Output:
	// a block size of 1000 tokens is outside 1..256
}

// Pause the scheduler and run it one step at a time, as the teaching mode
// does.
func ExampleEngine_Step() {
	m, tok := demo()
	e, _ := engine.New(m, tok, engine.DefaultConfig())
	defer e.Close()

	e.Pause()
	s, _ := e.Submit(context.Background(), engine.Request{Prompt: "Hello there", MaxTokens: 3, IgnoreEOS: true})
	for {
		rep, err := e.Step()
		if err != nil {
			break
		}
		fmt.Printf("step: %s, %s\n", engine.Count(rep.Prefill, "prompt token"), engine.Count(rep.Decode, "decode token"))
	}
	s.Collect()
	// Output:
	// step: 6 prompt tokens, 0 decode tokens
	// step: 0 prompt tokens, 1 decode token
	// step: 0 prompt tokens, 1 decode token
}

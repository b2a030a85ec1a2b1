package sample_test

import (
	"fmt"

	"kvscope/engine/sample"
)

func Example() {
	// Logits for a five-token vocabulary; token 3 was generated recently.
	logits := []float32{1.2, -0.4, 0.3, 2.5, 2.4}
	history := []int{0, 3}

	// Greedy decoding ignores everything but the largest logit.
	fmt.Println("greedy:", sample.Greedy(logits))

	// A repeat penalty of 1.1 divides token 3's logit (2.5 -> 2.27), so at
	// temperature 0 the arg-max moves to token 4.
	p := sample.DefaultParams()
	p.Temperature = 0
	p.RepeatPenalty = 1.1
	s, err := sample.New(p)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("greedy with repeat penalty:", s.Sample(logits, history))

	// With llama.cpp's defaults and a seed, draws are random but repeatable,
	// and top-k/top-p/min-p keep the unlikely tokens 1 and 2 out.
	p = sample.DefaultParams()
	p.MinP = 0.2
	p.Seed = 7
	a, _ := sample.New(p)
	b, _ := sample.New(p)
	same := true
	for range 20 {
		ta, tb := a.Sample(logits, history), b.Sample(logits, history)
		same = same && ta == tb
		if ta == 1 || ta == 2 {
			fmt.Println("min-p let an unlikely token through")
		}
	}
	fmt.Println("same seed, same tokens:", same)

	// Impossible settings are reported, not guessed at.
	p.TopP = 0
	_, err = sample.New(p)
	fmt.Println(err)

	// Output:
	// greedy: 3
	// greedy with repeat penalty: 4
	// same seed, same tokens: true
	// sample: top-p 0 is outside (0, 1] (1 disables it)
}

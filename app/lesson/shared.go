// This file holds the lesson "Shared system prompt": three
// conversations share one system prompt's blocks through the prefix cache.

package lesson

import (
	"fmt"
	"strings"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/model"
	"kvscope/engine/sample"
)

// sharedSystem is the shared-prompt lesson's long system prompt.
const sharedSystem = "You are a kind storyteller for young children. Tell short, gentle stories with simple words, friendly animals, bright colours and a happy ending. Every story has a beginning, a middle and an end, and each sentence is easy to read aloud at bedtime."

// sharedMessages are the three conversations' first messages.
var sharedMessages = []string{"Once upon a time, a little fox", "One day, a small blue bird", "Tom and his dog went to the park"}

// sharedRequest is conversation i's request: the system prompt's tokens,
// then its message's, so that every conversation's prompt starts with
// exactly the same tokens.
func sharedRequest(v *Env, i int) engine.Request {
	tok := v.E.Tokenizer()
	ids := tok.Encode(sharedSystem+"\n\n", true, false)
	ids = append(ids, tok.Encode(sharedMessages[i], false, false)...)
	sp := sample.DefaultParams()
	sp.Seed = uint64(i + 1)
	return engine.Request{Tokens: ids, MaxTokens: 160, IgnoreEOS: true, Sampling: &sp, Label: "Shared: " + strings.Join(strings.Fields(sharedMessages[i])[:3], " ")}
}

// sysBlocks is how many full blocks the system prompt fills.
func sysBlocks(v *Env, s *engine.Snapshot) int {
	return len(v.E.Tokenizer().Encode(sharedSystem+"\n\n", true, false)) / s.Cache.BlockSize
}

// SharedPrompt shows prefix sharing: three conversations with one long
// system prompt.
var SharedPrompt = &Lesson{
	Name:     "Shared system prompt",
	Purpose:  "Three conversations with one long system prompt: its full blocks are computed once and shared (ref count 3).",
	Mode:     "ref count",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) { return base, nil },
	Picture:  2,
	Steps: []Step{{
		Explain: "A first conversation computes the long system prompt. Held at its first generated token: each full block of the prompt is in the prefix cache, named by a hash of its tokens.",
		Promise: "every full block of the system prompt is in the prefix cache",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q, err := v.Submit(sharedRequest(v, 0))
			if err != nil {
				return nil, err
			}
			v.Set("q0", q)
			return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return generating(s, 1, q) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			r, _ := v.Get("q0").(*Req).Info(s)
			table := blockTable(s, r.Samples[0].Seq)
			k := sysBlocks(v, s)
			if k < 1 || len(table) < k {
				return fmt.Sprintf("the system prompt fills %s; the conversation holds %s", engine.Count(k, "full block"), engine.Count(len(table), "block")), false
			}
			hashed := 0
			for _, id := range table[:k] {
				if s.Cache.Blocks[id].Hashed {
					hashed++
				}
			}
			v.Set("sys", append([]int(nil), table[:k]...))
			return fmt.Sprintf("%d of the system prompt's %s are in the prefix cache (blocks %v)", hashed, engine.Count(k, "full block"), table[:k]), hashed == k
		},
	}, {
		Explain: "Two more conversations with the same system prompt find those blocks in the prefix cache and share them instead of computing them. Held as all three generate.",
		Promise: "ref count ≥ 3 on every block of the system prompt",
		Do: func(v *Env) (*engine.Snapshot, error) {
			q0 := v.Get("q0").(*Req)
			var qs []*Req
			for i := 1; i < 3; i++ {
				q, err := v.Submit(sharedRequest(v, i))
				if err != nil {
					return nil, err
				}
				qs = append(qs, q)
			}
			v.Set("others", qs)
			return v.StepUntil(ended(qs...), func(s *engine.Snapshot) bool { return generating(s, 1, append(qs, q0)...) })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			ids := v.Get("sys").([]int)
			rc := refs(s, ids)
			held := true
			for _, n := range rc {
				held = held && n >= 3
			}
			var cached []string
			for _, q := range v.Get("others").([]*Req) {
				r, _ := q.Info(s)
				cached = append(cached, fmt.Sprintf("%d of %d", r.CachedTokens, r.PromptTokens))
				held = held && r.CachedTokens >= len(ids)*s.Cache.BlockSize
			}
			return fmt.Sprintf("ref counts of the system prompt's blocks: %v; the new conversations reused %s prompt tokens", rc, strings.Join(cached, " and ")), held
		},
	}, {
		Explain: "When the replies end, the blocks stay in the prefix cache with no owner (ref 0), ready for the next conversation, until the pool needs the room.",
		Promise: "the system prompt's blocks stay cached after the conversations end",
		Do: func(v *Env) (*engine.Snapshot, error) {
			return v.RunUntil(ended(append(v.Get("others").([]*Req), v.Get("q0").(*Req))...))
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			ids := v.Get("sys").([]int)
			n := 0
			for _, id := range ids {
				if b := s.Cache.Blocks[id]; b.State == kvcache.BlockCached && b.Hashed {
					n++
				}
			}
			return fmt.Sprintf("%d of %s cached with ref 0", n, engine.Count(len(ids), "block")), n == len(ids)
		},
	}},
}

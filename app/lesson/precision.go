// This file holds the lesson "f16 vs int4": one budget at f16 K/V, then
// at int4.

package lesson

import (
	"fmt"
	"strings"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// precisionPrompt is the precision lesson's prompt.
const precisionPrompt = "Once upon a time, there was a little girl named Lily."

// precisionBudget is the precision lesson's budget.
const precisionBudget = 1 << 20

// The precision lesson's reply length, and the token each reply is held
// at.
const (
	precisionReply  = 40
	precisionHoldAt = 20
)

// Precision compares one budget at f16 and at int4 K/V.
var Precision = &Lesson{
	Name:    "f16 vs int4",
	Purpose: "One budget at f16, then at int4 K/V: how many more tokens fit, and how close the greedy reply stays.",
	Mode:    "precision",
	Settings: func(base engine.Config, _ *model.Model) (engine.Config, error) {
		base.Cache.K, base.Cache.V, base.Cache.Budget = kvstore.F16, kvstore.F16, precisionBudget
		return base, nil
	},
	Picture: 2,
	Steps: []Step{{
		Explain: fmt.Sprintf("At f16, each K and V value takes two bytes: the budget holds this many tokens. Held at token %d of a greedy reply, its blocks at f16.", precisionHoldAt),
		Promise: "the pool's size in tokens at f16, and the reply's blocks",
		Do:      func(v *Env) (*engine.Snapshot, error) { return precisionRun(v, "f16") },
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			v.Set("t16", m.TotalBlocks*m.BlockSize)
			fit, ok := poolAsCounted(v, s)
			return fmt.Sprintf("%s fit in %s (%s a token; %s counted for these settings); the reply holds %s", humanize.Comma(int64(m.TotalBlocks*m.BlockSize))+" tokens",
					humanize.IBytes(uint64(precisionBudget)), humanize.IBytes(uint64(m.BytesPerToken+0.5)), humanize.Comma(int64(fit.Tokens)), engine.Count(m.UsedBlocks, "block")),
				ok && m.TotalBlocks > 0 && m.UsedBlocks > 0
		},
	}, {
		Explain: fmt.Sprintf("The same budget at int4: four bits a value, keys per channel over 16 tokens with a scale and zero point each, values per token, rotated and coded with a 16-level table and one scale per 16 values. More tokens fit. Held at token %d of the same greedy reply.", precisionHoldAt),
		Promise: "more tokens held at int4 than at f16",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if _, err := v.RunUntil(ended(v.Get("f16").(*Req))); err != nil {
				return nil, err
			}
			if err := v.Reconfigure(func(c *engine.Config) { c.Cache.K, c.Cache.V = kvstore.Int4, kvstore.Int4 }); err != nil {
				return nil, err
			}
			return precisionRun(v, "int4")
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			t16, t4 := v.Int("t16"), m.TotalBlocks*m.BlockSize
			_, ok := poolAsCounted(v, s)
			kb, vb := kvstore.BitsPerValue(v.Model().CacheConfig(m.BlockSize, 1, kvstore.Int4, kvstore.Int4))
			return fmt.Sprintf("%s fit at int4 (%s a token: K %.2g, V %.2g bits a value with scales and zero points), %.1f× the %s at f16", humanize.Comma(int64(t4))+" tokens",
				humanize.IBytes(uint64(m.BytesPerToken+0.5)), kb, vb, float64(t4)/float64(max(t16, 1)), humanize.Comma(int64(t16))), ok && t4 > t16
		},
	}, {
		Explain: "Both replies done: the greedy reply at int4 stays close to the one at f16.",
		Promise: "both replies generated whole; the words they share",
		Do:      func(v *Env) (*engine.Snapshot, error) { return v.RunUntil(ended(v.Get("int4").(*Req))) },
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			a, b := v.Get("f16").(*Req), v.Get("int4").(*Req)
			fa, fb := a.Finals()[0], b.Finals()[0]
			x := a.Text(0)
			return fmt.Sprintf("%s at f16 and %s at int4; the replies agree on their first %d of %d words",
					engine.Count(fa.Generated, "token"), engine.Count(fb.Generated, "token"), commonPrefixWords(x, b.Text(0)), len(strings.Fields(x))),
				fa.Generated == precisionReply && fb.Generated == precisionReply
		},
	}},
}

// poolAsCounted reports the pool engine.Capacity (the Controls tab's
// capacity view) counts for the snapshot's settings, and whether the
// engine's pool holds exactly its tokens.
func poolAsCounted(v *Env, s *engine.Snapshot) (engine.Fit, bool) {
	fit, err := engine.Capacity(v.Model(), s.Config, 1)
	m := s.Cache.Metrics
	return fit, err == nil && fit.Tokens == m.TotalBlocks*m.BlockSize
}

// precisionRun starts the precision lesson's greedy reply and holds it at
// precisionHoldAt tokens.
func precisionRun(v *Env, key string) (*engine.Snapshot, error) {
	q, err := v.Submit(greedy(precisionPrompt, precisionReply, "greedy at "+key))
	if err != nil {
		return nil, err
	}
	v.Set(key, q)
	return v.StepUntil(ended(q), func(s *engine.Snapshot) bool { return generated(s, q) >= precisionHoldAt })
}

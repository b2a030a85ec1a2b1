// This file holds the lesson "Paged vs contiguous": one load with paged
// blocks, then with each sequence's whole context reserved up front.

package lesson

import (
	"fmt"
	"sync"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// The paged-vs-contiguous lesson's load and context.
const (
	pcUsers   = 6
	pcPrompt  = 32
	pcReply   = 96
	pcContext = 512
)

// PagedContiguousLoad is the paged-vs-contiguous lesson's load.
var PagedContiguousLoad = Load{Users: pcUsers, Prompt: pcPrompt, Reply: pcReply, Once: true, OpenEnded: true, Seed: 2}

// trackRunning records the most sequences running at once, and the
// share of reserved slots that held a token then.
func trackRunning(v *Env, key string) *peakUse {
	p := &peakUse{}
	v.Set(key, p)
	p.stop = v.Track(func(s *engine.Snapshot) {
		m := s.Cache.Metrics
		p.mu.Lock()
		if s.Running > p.n || (s.Running == p.n && m.ReservedSlots > p.reserved) {
			p.n, p.reserved, p.filled = s.Running, m.ReservedSlots, m.FilledSlots
		}
		p.mu.Unlock()
	})
	return p
}

// peakUse is the most sequences running at once, with the slots reserved
// and filled then.
type peakUse struct {
	mu                  sync.Mutex
	n, reserved, filled int
	stop                func() // ends the tracking
}

func (p *peakUse) get() (n, reserved, filled int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.reserved, p.filled
}

// PagedContiguous compares the paged allocator with reserving each
// sequence's whole context.
var PagedContiguous = &Lesson{
	Name:    "Paged vs contiguous",
	Purpose: "The same load with paged blocks, then with each sequence's whole context reserved up front: compare how many run at once, and the waste.",
	Mode:    "fill",
	Settings: func(base engine.Config, m *model.Model) (engine.Config, error) {
		base.Context = min(pcContext, m.Context)
		per := (base.Context + base.Cache.BlockSize - 1) / base.Cache.BlockSize
		sc := m.CacheConfig(base.Cache.BlockSize, 1, base.Cache.K, base.Cache.V)
		base.Cache.Budget = int64(per*5/2) * int64(kvstore.BlockBytes(sc))
		base.Sched.MaxSeqs = pcUsers
		return base, nil
	},
	Picture: 2,
	Steps: []Step{{
		Explain: fmt.Sprintf("Paged: %d users, each reply allowed the whole %d-token context, each user reading %d tokens of it. Held as all of them run: blocks are handed out as the text grows, so little is reserved that holds no token.", pcUsers, pcContext, pcReply),
		Promise: fmt.Sprintf("all %d users run at once", pcUsers),
		Do: func(v *Env) (*engine.Snapshot, error) {
			trackRunning(v, "paged")
			g, err := v.Load(PagedContiguousLoad)
			if err != nil {
				return nil, err
			}
			v.Set("gp", g)
			return v.StepUntil(g.Done(), func(s *engine.Snapshot) bool {
				return s.Running == pcUsers && s.Last.Decode > 0 && len(s.Last.Allocated) > 0 && s.Cache.Metrics.UsedBlocks >= 4*pcUsers
			})
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			m := s.Cache.Metrics
			return fmt.Sprintf("%s running at once in %s of %s; this step handed out %s; %s of %s reserved hold a token",
				engine.Count(s.Running, "sequence"), engine.Count(m.UsedBlocks, "block"), humanize.Comma(int64(m.TotalBlocks)), engine.Count(len(s.Last.Allocated), "block"),
				humanize.Comma(int64(m.FilledSlots)), engine.Count(m.ReservedSlots, "slot")), s.Running == pcUsers
		},
	}, {
		Explain: fmt.Sprintf("Contiguous: the same budget and load, but each sequence reserves its whole %d-token context up front, since nobody knows how long a reply will grow. Held as the pool is full of reservations and the other users wait.", pcContext),
		Promise: "at least 1.5× as many sequences at once paged as contiguous",
		Do: func(v *Env) (*engine.Snapshot, error) {
			if _, err := v.RunUntil(v.Get("gp").(*LoadGen).Done()); err != nil {
				return nil, err
			}
			v.Get("paged").(*peakUse).stop()
			if err := v.Reconfigure(func(c *engine.Config) { c.Cache.Allocator = kvcache.Contiguous }); err != nil {
				return nil, err
			}
			trackRunning(v, "contiguous")
			g, err := v.Load(PagedContiguousLoad)
			if err != nil {
				return nil, err
			}
			return v.StepUntil(g.Done(), func(s *engine.Snapshot) bool { return s.Running > 0 && s.Waiting > 0 && s.Last.Decode > 0 })
		},
		Check: func(v *Env, s *engine.Snapshot) (string, bool) {
			p, _, _ := v.Get("paged").(*peakUse).get()
			c, _, _ := v.Get("contiguous").(*peakUse).get()
			m := s.Cache.Metrics
			return fmt.Sprintf("contiguous: %s at once, %d waiting, %s of %s reserved hold a token; paged: %s at once (%.1f×)",
				engine.Count(c, "sequence"), s.Waiting, humanize.Comma(int64(m.FilledSlots)), engine.Count(m.ReservedSlots, "slot"),
				engine.Count(p, "sequence"), float64(p)/float64(max(c, 1))), c > 0 && float64(p) >= 1.5*float64(c)
		},
	}},
}

// This file holds the vLLM page's refresh: the figures, tree and metrics
// computed off the UI goroutine every RefreshEvery, and how they are shown.

package remote

import (
	"fmt"
	"strings"
	"time"

	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/vllm/metrics"
	"kvscope/vllm/prefixcache"
)

// frame is what the refresh goroutine computed for the UI.
type frame struct {
	rows    map[*source]string
	total   string
	shown   string
	tree    prefixcache.Tree
	evicted []prefixcache.Eviction
	series  []metrics.Sample
	hasTree bool
}

// loop computes the figures and the shown tree off the UI goroutine every
// RefreshEvery and hands them to it.
func (p *vllmPanel) loop() {
	defer close(p.loopDone)
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		f := p.compute()
		uithread.Do(func() {
			select {
			case <-p.stop:
				return
			default:
			}
			p.show(f)
		})
	}
}

func (p *vllmPanel) compute() frame {
	p.mu.Lock()
	sources := append([]*source(nil), p.sources...)
	shown := p.shown
	p.mu.Unlock()
	f := frame{rows: map[*source]string{}, shown: shown}
	var sum metrics.Sample
	nMet := 0
	var storedPS, removedPS float64
	for _, s := range sources {
		c := p.cluster.Source(s.src.Name)
		st := c.Stats()
		a, r := c.Churn(ChurnWindow)
		storedPS += a
		removedPS += r
		row := fmt.Sprintf("%s\n%s in %s, %d evicted\nchurn +%.1f / −%.1f blocks/s", s.src.Name, engine.Count(st.Blocks, "cached block"), engine.Count(st.Roots, "chain"), st.Removed, a, r)
		if s.series != nil {
			if m, ok := s.series.Last(); ok {
				row += fmt.Sprintf("\nprefix hit rate %.1f%% (%.1f%% lately)\nusage %.1f%%, %.0f running, %.0f waiting", 100*m.HitRate(), 100*s.series.HitRate(ChurnWindow*3), 100*m.KVCacheUsage, m.Running, m.Waiting)
				sum.PrefixCacheHits += m.PrefixCacheHits
				sum.PrefixCacheQueries += m.PrefixCacheQueries
				nMet++
			}
		}
		if st.Lost > 0 {
			row += fmt.Sprintf("\n%s lost: the picture may be incomplete", engine.Count(int(st.Lost), "batch"))
		}
		if pr := s.lastProblem(); pr != "" {
			row += "\nlast problem: " + pr
		}
		f.rows[s] = row
		if s.src.Name == shown {
			tr := c.Tree()
			p.mu.Lock()
			evs, next := c.EvictionsSince(s.evCursor)
			s.evCursor = next
			p.mu.Unlock()
			f.tree, f.evicted, f.hasTree = tr, evs, true
			if s.series != nil {
				f.series = s.series.Samples()
			}
		}
	}
	if len(sources) > 0 {
		total, distinct := p.cluster.Total()
		f.total = fmt.Sprintf("Total, %s\n%s (%d distinct), %s\nchurn +%.1f / −%.1f blocks/s, %d evicted", engine.Count(len(sources), "instance"),
			engine.Count(total.Blocks, "cached block"), distinct, engine.Count(total.Tokens, "token"), storedPS, removedPS, total.Removed)
		if nMet > 0 {
			f.total += fmt.Sprintf("\nprefix hit rate %.1f%%", 100*sum.HitRate())
		}
	}
	return f
}

// show puts a frame on screen (UI goroutine).
func (p *vllmPanel) show(f frame) {
	changed := false
	for s, row := range f.rows {
		if s.row.Text != row {
			s.row.SetText(row)
			changed = true
		}
	}
	if f.total == "" {
		f.total = "No instance watched."
	}
	if p.total.Text != f.total {
		p.total.SetText(f.total)
		changed = true
	}
	if changed {
		p.rows.Refresh()
		p.left.Refresh() // the labels' heights changed with their lines
	}
	p.mu.Lock()
	stale := f.shown != p.shown // another instance was picked meanwhile
	p.mu.Unlock()
	if !f.hasTree || stale {
		return
	}
	p.tree.SetTree(f.tree, f.evicted)
	if p.tree.Selected() >= 0 {
		p.showChain()
	}
	var usage, hit, run, pre []float64
	for i, s := range f.series {
		usage = append(usage, s.KVCacheUsage)
		run = append(run, s.Running)
		pre = append(pre, s.Preemptions)
		if i > 0 {
			dq := s.PrefixCacheQueries - f.series[i-1].PrefixCacheQueries
			dh := s.PrefixCacheHits - f.series[i-1].PrefixCacheHits
			r := 0.0
			if dq > 0 && dh >= 0 {
				r = dh / dq
			}
			hit = append(hit, r)
		}
	}
	last := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		return v[len(v)-1]
	}
	if len(f.series) > 0 {
		m := f.series[len(f.series)-1]
		p.usage.set(fmt.Sprintf("KV-cache usage %.1f%%", 100*last(usage)), usage)
		p.hits.set(fmt.Sprintf("Hit rate %.1f%% (all: %.1f%%)", 100*last(hit), 100*m.HitRate()), hit)
		p.reqs.set(fmt.Sprintf("Running %.0f, waiting %.0f", m.Running, m.Waiting), run)
		p.pre.set(fmt.Sprintf("Preemptions %.0f", m.Preemptions), pre)
	}
}

// showChain writes the selected chain's tokens: as text through the
// tokenizer where one is open, else as ids.
func (p *vllmPanel) showChain() {
	i := p.tree.Selected()
	if i < 0 {
		p.text.SetText("")
		return
	}
	tr := p.tree.Tree()
	ids := tr.ChainTokens(i)
	head := fmt.Sprintf("Chain of %d blocks, %d tokens: ", len(tr.Chain(i)), len(ids))
	var body string
	if p.tok != nil {
		xs := make([]int, len(ids))
		for j, id := range ids {
			xs[j] = int(id)
		}
		body = "“" + p.tok.Decode(xs) + "”"
	} else {
		var b strings.Builder
		for j, id := range ids {
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprint(&b, id)
			if j == 2000 {
				b.WriteString(" …")
				break
			}
		}
		body = b.String()
	}
	if t := head + body; p.text.Text != t {
		p.text.SetText(t)
	}
}

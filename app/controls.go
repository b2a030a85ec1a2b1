// This file holds the Controls tab: its sliders and choices for the cache,
// the scheduler and the backend, and how it shows the settings in force
// and the pool.

package app

import (
	"fmt"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/backend/native"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

// BlockSizes are the block-size slider's stops, in tokens.
var BlockSizes = []int{1, 2, 4, 8, 16, 32, 64, 128, 256}

// Budgets are the cache-budget slider's stops in bytes; 0 is automatic
// (enough for every concurrent sequence's full context, capped).
var Budgets = []int64{0, 256 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20, 1 << 30, 2 << 30}

// controls are the cache and scheduler settings. Every change goes to the
// engine through Reconfigure; a refused change shows the engine's reason
// and the controls go back to the settings in force.
type controls struct {
	a *App

	block     *widget.Slider
	blockLab  *widget.Label
	budget    *widget.Slider
	budgetLab *widget.Label
	k, v      *widget.Select
	eviction  *widget.Select
	preempt   *widget.Select
	overflow  *widget.Select
	allocator *widget.RadioGroup
	seqs      *widget.Slider
	seqsLab   *widget.Label
	backend   *widget.Select // the compute backend: choosing one reloads the model
	result    *widget.Label
	pool      *widget.Label
	capacity  *capacityView
	serve     *serveView    // the OpenAI-compatible server's toggle (serve.go)
	inForce   engine.Config // the settings the last snapshot showed in force
	root      fyne.CanvasObject

	loading bool // show is setting the widgets: do not reconfigure

	// flight is the Reconfigure under way (nil when none is); queued are
	// the changes made since, applied together after it.
	flight *flight
	queued []func(cfg *engine.Config)
}

func newControls(a *App) *controls {
	c := &controls{a: a}
	c.block = widget.NewSlider(0, float64(len(BlockSizes)-1))
	c.blockLab = widget.NewLabel("")
	c.block.OnChanged = func(f float64) {
		c.blockLab.SetText(fmt.Sprintf("%d tokens", BlockSizes[int(f)]))
		c.preview()
	}
	c.block.OnChangeEnded = func(f float64) {
		c.apply(func(cfg *engine.Config) { cfg.Cache.BlockSize = BlockSizes[int(f)] })
	}
	c.budget = widget.NewSlider(0, float64(len(Budgets)-1))
	c.budgetLab = widget.NewLabel("")
	c.budget.OnChanged = func(f float64) {
		c.budgetLab.SetText(budgetText(Budgets[int(f)]))
		c.preview()
	}
	c.budget.OnChangeEnded = func(f float64) {
		c.apply(func(cfg *engine.Config) { cfg.Cache.Budget = Budgets[int(f)] })
	}
	var precs []string
	for _, p := range kvstore.Precisions() {
		precs = append(precs, p.String())
	}
	c.k = widget.NewSelect(precs, func(s string) {
		if p, err := kvstore.ParsePrecision(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.K = p })
		}
	})
	c.v = widget.NewSelect(precs, func(s string) {
		if p, err := kvstore.ParsePrecision(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.V = p })
		}
	})
	c.eviction = widget.NewSelect([]string{"lru", "lfu", "fifo"}, func(s string) {
		if p, err := kvcache.ParseEvictionPolicy(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.Eviction = p })
		}
	})
	c.preempt = widget.NewSelect([]string{"recompute", "swap"}, func(s string) {
		if p, err := kvcache.ParsePreemptMode(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.Preempt = p })
		}
	})
	c.overflow = widget.NewSelect([]string{"stop", "rolling", "truncate"}, func(s string) {
		if p, err := kvcache.ParseOverflowPolicy(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.Overflow = p })
		}
	})
	c.allocator = widget.NewRadioGroup([]string{"paged", "contiguous"}, func(s string) {
		if p, err := kvcache.ParseAllocator(s); err == nil {
			c.apply(func(cfg *engine.Config) { cfg.Cache.Allocator = p })
		}
	})
	c.allocator.Horizontal = true
	c.allocator.Required = true
	c.seqs = widget.NewSlider(1, 64)
	c.seqsLab = widget.NewLabel("")
	c.seqs.OnChanged = func(f float64) { c.seqsLab.SetText(fmt.Sprint(int(f))) }
	c.seqs.OnChangeEnded = func(f float64) {
		c.apply(func(cfg *engine.Config) { cfg.Sched.MaxSeqs = int(f) })
	}
	c.backend = widget.NewSelect(append([]string{"auto"}, native.Backends...), func(s string) {
		if c.loading {
			return
		}
		c.chooseBackend(s)
	})
	c.result = widget.NewLabel("Changes apply at once, while chats run. Settings that need a new pool drain the running sequences, rebuild it and recompute them.")
	c.result.Wrapping = fyne.TextWrapWord
	c.pool = widget.NewLabel("")
	c.pool.Wrapping = fyne.TextWrapWord

	row := func(s *widget.Slider, l *widget.Label) fyne.CanvasObject {
		l.Alignment = fyne.TextAlignTrailing
		return container.NewBorder(nil, nil, nil, container.NewGridWrap(fyne.NewSize(110, l.MinSize().Height), l), s)
	}
	form := widget.NewForm(
		widget.NewFormItem("Block size", row(c.block, c.blockLab)),
		widget.NewFormItem("Cache budget", row(c.budget, c.budgetLab)),
		widget.NewFormItem("K precision", c.k),
		widget.NewFormItem("V precision", c.v),
		widget.NewFormItem("Eviction", c.eviction),
		widget.NewFormItem("Preemption", c.preempt),
		widget.NewFormItem("Context overflow", c.overflow),
		widget.NewFormItem("Allocator", c.allocator),
		widget.NewFormItem("Max sequences", row(c.seqs, c.seqsLab)),
		widget.NewFormItem("Compute backend", c.backend),
	)
	c.capacity = newCapacityView()
	c.serve = newServeView(a)
	c.root = container.NewVScroll(container.NewVBox(form, c.pool, c.result, c.serve.root, c.capacity.root))
	c.show(engine.DefaultConfig(), nil)
	return c
}

// budgetText names a budget stop.
func budgetText(b int64) string {
	if b == 0 {
		return "auto"
	}
	return humanize.IBytes(uint64(b))
}

// nearest returns the index of the stop closest to x.
func nearest[T int | int64](stops []T, x T) int {
	best := 0
	for i, s := range stops {
		d, bd := s-x, stops[best]-x
		if d < 0 {
			d = -d
		}
		if bd < 0 {
			bd = -bd
		}
		if d < bd {
			best = i
		}
	}
	return best
}

// show sets the widgets to cfg without reconfiguring; s, when given, says
// what the pool holds.
func (c *controls) show(cfg engine.Config, s *engine.Snapshot) {
	c.loading = true
	defer func() { c.loading = false }()
	c.block.SetValue(float64(nearest(BlockSizes, cfg.Cache.BlockSize)))
	c.blockLab.SetText(fmt.Sprintf("%d tokens", cfg.Cache.BlockSize))
	c.budget.SetValue(float64(nearest(Budgets, cfg.Cache.Budget)))
	c.budgetLab.SetText(budgetText(cfg.Cache.Budget))
	c.k.SetSelected(cfg.Cache.K.String())
	c.v.SetSelected(cfg.Cache.V.String())
	if be := c.a.settings.Backend; be != "" {
		c.backend.SetSelected(be)
	} else {
		c.backend.SetSelected("auto")
	}
	c.eviction.SetSelected(cfg.Cache.Eviction.String())
	c.preempt.SetSelected(cfg.Cache.Preempt.String())
	c.overflow.SetSelected(cfg.Cache.Overflow.String())
	c.allocator.SetSelected(cfg.Cache.Allocator.String())
	c.seqs.SetValue(float64(cfg.Sched.MaxSeqs))
	c.seqsLab.SetText(fmt.Sprint(cfg.Sched.MaxSeqs))
	c.capacity.show(c.model(), cfg, c.capacity.running)
	c.showPool(s)
}

// preview redraws the capacity view for the block size and budget the
// sliders show while they move (before they are applied).
func (c *controls) preview() {
	if c.loading {
		return
	}
	cfg := c.capacity.cfg
	cfg.Cache.BlockSize = BlockSizes[int(c.block.Value)]
	cfg.Cache.Budget = Budgets[int(c.budget.Value)]
	c.capacity.show(c.model(), cfg, c.capacity.running)
}

// model is the loaded model, or nil.
func (c *controls) model() *model.Model {
	if e := c.a.Engine(); e != nil {
		return e.Model()
	}
	return nil
}

// showPool says what the pool holds under the settings in force, and how
// many sequences run on it.
func (c *controls) showPool(s *engine.Snapshot) {
	if s == nil || s.Cache == nil {
		c.pool.SetText("")
		c.capacity.show(c.model(), c.capacity.cfg, 0)
		return
	}
	if m := c.model(); c.capacity.running != s.Running || c.inForce != s.Config || c.capacity.m != m {
		cfg := c.capacity.cfg // a slider's preview stays while the count changes
		if c.inForce != s.Config || c.capacity.m != m {
			cfg = s.Config
		}
		c.inForce = s.Config
		c.capacity.show(m, cfg, s.Running)
	}
	m := s.Cache.Metrics
	c.pool.SetText(fmt.Sprintf("Pool: %d blocks of %d tokens = %s tokens in %s (%s a token at K %s / V %s); context limit %d tokens a sequence.",
		m.TotalBlocks, m.BlockSize, humanize.Comma(int64(m.TotalBlocks*m.BlockSize)),
		humanize.IBytes(uint64(m.TotalBlocks)*uint64(max(m.BlockBytes, 0))), humanize.IBytes(uint64(m.BytesPerToken+0.5)),
		s.Config.Cache.K, s.Config.Cache.V, s.Context))
}

// ChatTokens is the shortest chat the controls let the pool be too small
// for: a short prompt and the start of its reply.
const ChatTokens = 64

// plural picks a word's form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

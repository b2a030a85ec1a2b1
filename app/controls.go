package app

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/store"
	"kvscope/app/uithread"
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

// apply changes the engine's config through Reconfigure, off the UI
// goroutine (a rebuild drains running sequences first, and any change
// waits for the step under way), and shows the outcome. One change is in
// flight at a time: changes made meanwhile wait, built on it, and go to the
// engine together as one Reconfigure when it is applied, so dragging a
// slider back and forth never piles up work.
func (c *controls) apply(change func(cfg *engine.Config)) {
	if c.loading {
		return
	}
	e := c.a.Engine()
	if e == nil {
		c.result.SetText("No model is open: the settings will apply when one is.")
		cfg := c.a.cacheConfig()
		change(&cfg)
		c.a.settings.Cache = cacheSettings(cfg)
		c.a.saveSettings()
		return
	}
	if c.a.teach != nil && c.a.teach.lessons.running() {
		c.result.Importance = widget.WarningImportance
		c.result.SetText("A lesson is running on its own settings; yours come back when it ends. Stop it to change them.")
		c.show(e.Config(), e.Snapshot())
		return
	}
	if c.flight != nil {
		c.queued = append(c.queued, change)
		c.result.SetText(fmt.Sprintf("Applying… (%d more %s after the one under way)", len(c.queued), plural(len(c.queued), "change", "changes")))
		return
	}
	c.send(e, []func(*engine.Config){change})
}

// ChatTokens is the shortest chat the controls let the pool be too small
// for: a short prompt and the start of its reply.
const ChatTokens = 64

// chatFits refuses settings under which no chat could run, though the
// engine could build the pool: fewer token slots than ChatTokens, or, with
// the contiguous allocator, than one whole context, which a chat reserves
// since nobody knows how long its reply will grow.
func chatFits(m *model.Model, cfg engine.Config) error {
	f, err := engine.Capacity(m, cfg, ChatTokens)
	if err != nil || f.Seqs >= 1 {
		return nil // the engine says why it refuses
	}
	need := min(ChatTokens, f.PerSeq*cfg.Cache.BlockSize)
	what := "a short chat needs " + engine.Count(need, "token")
	if cfg.Cache.Allocator == kvcache.Contiguous {
		what = "the contiguous allocator reserves each chat's whole context, " + engine.Count(f.PerSeq, "block")
	}
	return fmt.Errorf("the pool would hold %s of %s (%s), and %s: no chat could run (choose a larger budget or a smaller block size)",
		engine.Count(f.Blocks, "block"), engine.Count(cfg.Cache.BlockSize, "token"), engine.Bytes(f.Budget), what)
}

// flight is one Reconfigure under way.
type flight struct {
	e       *engine.Engine
	changes []func(cfg *engine.Config)
}

// send starts a Reconfigure of e with changes on top of the settings in
// force (UI goroutine).
func (c *controls) send(e *engine.Engine, changes []func(cfg *engine.Config)) {
	cfg := e.Config() // the published settings: does not wait for the engine
	for _, ch := range changes {
		ch(&cfg)
	}
	if err := chatFits(e.Model(), cfg); err != nil {
		c.result.Importance = widget.DangerImportance
		c.result.SetText("Refused: " + err.Error())
		c.queued = nil
		c.show(e.Config(), e.Snapshot())
		return
	}
	f := &flight{e: e, changes: changes}
	c.flight = f
	c.result.Importance = widget.MediumImportance
	c.result.SetText("Applying… (the engine takes it after the step under way)")
	go func() {
		err := e.Reconfigure(cfg)
		uithread.Do(func() { c.applied(f, err) })
	}()
}

// applied shows the outcome of a Reconfigure (UI goroutine). A refused
// change drops the changes queued after it, which were built on it. An
// applied one is saved (no change is sent while a lesson runs, so the
// engine's settings are the user's).
func (c *controls) applied(f *flight, err error) {
	e := f.e
	mine := c.flight == f // else forget dropped it: a model switch
	if mine {
		c.flight = nil
	}
	if err != nil {
		c.result.Importance = widget.DangerImportance
		c.result.SetText("Refused: " + err.Error())
		if mine {
			c.queued = nil
		}
	} else {
		c.result.Importance = widget.SuccessImportance
		c.result.SetText("Applied: " + describeConfig(e.Config()))
		if c.a.Engine() == e {
			c.a.settings.Cache = cacheSettings(e.Config())
		} else {
			cfg := c.a.cacheConfig()
			for _, ch := range f.changes {
				ch(&cfg)
			}
			c.a.settings.Cache = cacheSettings(cfg)
		}
		c.a.saveSettings()
	}
	cur := c.a.Engine()
	if cur == nil {
		return
	}
	if c.flight == nil && len(c.queued) > 0 {
		q := c.queued
		c.queued = nil
		c.send(cur, q)
		return
	}
	if c.flight == nil {
		c.show(cur.Config(), cur.Snapshot()) // what is in force now
	}
}

// forget drops the changes queued for the engine in use (UI goroutine):
// after a model switch they would reconfigure an engine that is going. A
// Reconfigure under way on it still reports, but starts nothing after it.
func (c *controls) forget() {
	c.flight = nil
	c.queued = nil
}

// Busy reports whether a change is on its way to the engine.
func (c *controls) Busy() bool { return c.flight != nil }

// plural picks a word's form for n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Result returns the line saying what the last change did.
func (c *controls) Result() string { return c.result.Text }

// describeConfig names the cache settings in one line.
func describeConfig(cfg engine.Config) string {
	cc := cfg.Cache
	return fmt.Sprintf("block size %d, budget %s, K %s / V %s, %s eviction, %s preemption, %s overflow, %s allocator, %d sequences",
		cc.BlockSize, budgetText(cc.Budget), cc.K, cc.V, cc.Eviction, cc.Preempt, cc.Overflow, cc.Allocator, cfg.Sched.MaxSeqs)
}

// cacheSettings turns an engine config into its saved form.
func cacheSettings(cfg engine.Config) *store.Cache {
	cc := cfg.Cache
	return &store.Cache{BlockSize: cc.BlockSize, Budget: cc.Budget, K: cc.K.String(), V: cc.V.String(),
		Eviction: cc.Eviction.String(), Preempt: cc.Preempt.String(), Allocator: cc.Allocator.String(),
		Overflow: cc.Overflow.String(), MaxSeqs: cfg.Sched.MaxSeqs}
}

// engineConfig turns saved settings into an engine config, starting from
// the defaults; it names the first setting it cannot read.
func engineConfig(s *store.Cache) (engine.Config, error) {
	cfg := engine.DefaultConfig()
	if s == nil {
		return cfg, nil
	}
	var errs []string
	if s.BlockSize > 0 {
		cfg.Cache.BlockSize = s.BlockSize
	}
	if s.Budget >= 0 {
		cfg.Cache.Budget = s.Budget
	}
	if s.MaxSeqs > 0 {
		cfg.Sched.MaxSeqs = s.MaxSeqs
	}
	parse := func(name, v string, f func(string) error) {
		if v == "" {
			return
		}
		if err := f(v); err != nil {
			errs = append(errs, fmt.Sprintf("%s %q: %v", name, v, err))
		}
	}
	parse("K precision", s.K, func(v string) (err error) { cfg.Cache.K, err = kvstore.ParsePrecision(v); return })
	parse("V precision", s.V, func(v string) (err error) { cfg.Cache.V, err = kvstore.ParsePrecision(v); return })
	parse("eviction", s.Eviction, func(v string) (err error) { cfg.Cache.Eviction, err = kvcache.ParseEvictionPolicy(v); return })
	parse("preemption", s.Preempt, func(v string) (err error) { cfg.Cache.Preempt, err = kvcache.ParsePreemptMode(v); return })
	parse("allocator", s.Allocator, func(v string) (err error) { cfg.Cache.Allocator, err = kvcache.ParseAllocator(v); return })
	parse("overflow", s.Overflow, func(v string) (err error) { cfg.Cache.Overflow, err = kvcache.ParseOverflowPolicy(v); return })
	if len(errs) > 0 {
		return engine.DefaultConfig(), fmt.Errorf("saved cache settings ignored: %s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

// chooseBackend saves the compute backend the user picked and reloads the
// model on it (its conversations stay; replies under way end as
// interrupted). A backend that does not load is said in the status line,
// and the best that does runs instead.
func (c *controls) chooseBackend(name string) {
	if name == "auto" {
		name = ""
	}
	if name == c.a.settings.Backend {
		return
	}
	c.a.settings.Backend = name
	c.a.saveSettings()
	if m := c.a.mdl; m != nil {
		c.result.SetText("Reloading " + m.name + " on the " + c.backend.Selected + " backend…")
		c.a.openAsync(m.path)
	}
}

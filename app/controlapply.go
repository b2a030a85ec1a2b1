// This file holds how the Controls tab applies a change: one Reconfigure in
// flight at a time off the UI goroutine, what it says when the engine refuses,
// the saved settings it writes, and the compute backend's reload.

package app

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
)

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

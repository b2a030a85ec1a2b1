package app

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	"github.com/dustin/go-humanize"

	"kvscope/app/inspector"
	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
	"kvscope/engine/tokenizer"
)

// A Preset sets up one lesson in a click.
type Preset struct {
	Name  string // the button's label
	About string // one line: what it shows
	run   func(t *teacher, ctx context.Context, e *engine.Engine) error
}

// Presets are the teaching presets, in button order.
var Presets = []Preset{
	{"What the cache buys", "The same greedy reply with the KV cache on, then off: time per token against position is flat with the cache and grows without it.", (*teacher).lessonCache},
	{"Shared system prompt", "Three conversations with one long system prompt: its full blocks are computed once and shared (ref count 3).", (*teacher).lessonShared},
	{"Parallel sampling n = 4", "Four samples fork one prompt: they share its blocks, and the first write into the shared last block copies it (copy on write).", (*teacher).lessonParallel},
	{"Budget too small", "Six users on a pool that holds about two of them: the scheduler preempts, the cache evicts, and everyone still finishes.", (*teacher).lessonSmall},
	{"Paged vs contiguous", "The same load with paged blocks, then with each sequence's whole context reserved up front: compare how many run at once and the waste.", (*teacher).lessonContiguous},
	{"f16 vs int4", "One budget at f16, then at int4 K/V: how many more tokens fit, and how close the greedy reply stays.", (*teacher).lessonPrecision},
}

// teacher is the Teaching tab: step mode, slow motion, the load generator
// and the presets.
type teacher struct {
	a *App

	pause, step, resume *widget.Button
	delay               *widget.Slider
	delayLab            *widget.Label
	explain             *widget.Label
	users, plen, rlen   *widget.Slider
	usersLab            *widget.Label
	loadBtn             *widget.Button
	loadLab             *widget.Label
	restoreBtn          *widget.Button // disabled while a restore is under way
	lesson              *widget.Label
	chart               *chart
	root                fyne.CanvasObject

	load       *loadGen
	lessonStop context.CancelFunc
	lessonDone chan struct{}
	paused     bool
	// busy names the Pause, Resume or Step under way ("" when none is):
	// the step-mode buttons stay disabled until it ends, so clicks never
	// pile up behind a long step.
	busy string
	// delayBusy: a SetDelay is under way; delayAgain: the slider moved
	// meanwhile, so its value goes to the engine when that one ends.
	delayBusy, delayAgain bool

	// saved is the user's config from before the first lesson changed the
	// engine (nil when no lesson has since): "Restore my cache settings"
	// puts it back. The user's own changes meanwhile apply to it too.
	saved *engine.Config
}

func newTeacher(a *App) *teacher {
	t := &teacher{a: a}
	t.pause = widget.NewButtonWithIcon("Pause", theme.MediaPauseIcon(), func() { t.setPaused(true) })
	t.step = widget.NewButtonWithIcon("Step", theme.MediaSkipNextIcon(), func() { t.doStep() })
	t.resume = widget.NewButtonWithIcon("Resume", theme.MediaPlayIcon(), func() { t.setPaused(false) })
	t.step.Disable()
	t.resume.Disable()
	t.delay = widget.NewSlider(0, 1000)
	t.delay.Step = 25
	t.delayLab = widget.NewLabel("full speed")
	t.delay.OnChanged = func(v float64) { t.delayLab.SetText(delayText(v)) }
	t.delay.OnChangeEnded = func(float64) {
		if e := a.Engine(); e != nil {
			t.applyDelay(e)
		}
	}
	t.explain = widget.NewLabel("Pause the scheduler, then Step: each step says what it ran and why.")
	t.explain.Wrapping = fyne.TextWrapWord

	t.users = widget.NewSlider(1, 16)
	t.users.SetValue(4)
	t.usersLab = widget.NewLabel("")
	t.plen = widget.NewSlider(8, 512)
	t.plen.Step = 8
	t.plen.SetValue(64)
	t.rlen = widget.NewSlider(8, 512)
	t.rlen.Step = 8
	t.rlen.SetValue(128)
	t.loadLab = widget.NewLabel("")
	t.loadLab.Wrapping = fyne.TextWrapWord
	showLoad := func(float64) {
		t.usersLab.SetText(fmt.Sprintf("%d users, prompts of %d tokens, replies of %d", int(t.users.Value), int(t.plen.Value), int(t.rlen.Value)))
	}
	t.users.OnChanged, t.plen.OnChanged, t.rlen.OnChanged = showLoad, showLoad, showLoad
	showLoad(0)
	t.loadBtn = widget.NewButtonWithIcon("Start load", theme.MediaPlayIcon(), func() {
		if t.load != nil {
			t.stopLoad()
			return
		}
		if err := t.startLoad(int(t.users.Value), int(t.plen.Value), int(t.rlen.Value)); err != nil {
			t.loadLab.SetText(err.Error())
		}
	})

	t.lesson = widget.NewLabel("Choose a preset: each sets up a lesson and says what happens as it runs.")
	t.lesson.Wrapping = fyne.TextWrapWord
	t.chart = newChart("time per token (ms) against position", "ms")
	t.chart.Hide()

	var presets []fyne.CanvasObject
	for _, p := range Presets {
		b := widget.NewButton(p.Name, func() { t.runPreset(p) })
		about := widget.NewLabel(p.About)
		about.Wrapping = fyne.TextWrapWord
		about.Importance = widget.LowImportance
		presets = append(presets, container.NewBorder(nil, nil, container.NewGridWrap(fyne.NewSize(190, b.MinSize().Height), b), nil, about))
	}
	t.restoreBtn = widget.NewButton("Restore my cache settings", func() { t.restore() })
	restore := t.restoreBtn
	stopLesson := widget.NewButton("Stop the lesson", func() { t.stopLesson(); t.say("Lesson stopped.") })

	step := widget.NewCard("Step mode", "", container.NewVBox(
		container.NewHBox(t.pause, t.step, t.resume),
		container.NewBorder(nil, nil, widget.NewLabel("Slow motion"), t.delayLab, t.delay),
		t.explain))
	load := widget.NewCard("Load generator", "Synthetic users send real requests through the engine, one after another.", container.NewVBox(
		container.NewBorder(nil, nil, widget.NewLabel("Users"), nil, t.users),
		container.NewBorder(nil, nil, widget.NewLabel("Prompt tokens"), nil, t.plen),
		container.NewBorder(nil, nil, widget.NewLabel("Reply tokens"), nil, t.rlen),
		t.usersLab, container.NewHBox(t.loadBtn), t.loadLab))
	lessons := widget.NewCard("Presets", "", container.NewVBox(append(presets,
		container.NewHBox(stopLesson, restore), t.lesson, t.chart)...))
	t.root = container.NewVScroll(container.NewVBox(step, lessons, load))
	return t
}

func delayText(ms float64) string {
	if ms == 0 {
		return "full speed"
	}
	return fmt.Sprintf("%.0f ms a step", ms)
}

// delayValue is the slow-motion slider's delay (UI goroutine).
func (t *teacher) delayValue() time.Duration { return time.Duration(t.delay.Value) * time.Millisecond }

// applyDelay puts the slow-motion slider's delay in force on e, off the UI
// goroutine (SetDelay waits for the step under way). One SetDelay is under
// way at a time; the slider's newest value follows when it ends. If e
// refuses the delay, the slider goes back to full speed and says why.
func (t *teacher) applyDelay(e *engine.Engine) {
	if t.delayBusy {
		t.delayAgain = true
		return
	}
	t.delayBusy = true
	d := t.delayValue()
	go func() {
		err := e.SetDelay(d)
		uithread.Do(func() {
			t.delayBusy = false
			if err != nil && !errors.Is(err, engine.ErrClosed) {
				t.delay.SetValue(0)
				t.delayLab.SetText(delayText(0))
				t.say("Slow motion: " + err.Error())
			}
			if t.delayAgain {
				t.delayAgain = false
				if cur := t.a.Engine(); cur != nil && t.delayValue() != d {
					t.applyDelay(cur)
				}
			}
		})
	}()
}

// delayIn says which delay a new engine runs at (UI goroutine); if the
// slider moved since, its value goes to e.
func (t *teacher) delayIn(e *engine.Engine, d time.Duration) {
	if t.delayValue() != d {
		t.applyDelay(e)
	}
}

// say shows a lesson line (UI goroutine).
func (t *teacher) say(s string) { t.lesson.SetText(s) }

// sayLater shows a lesson line from a lesson's goroutine.
func (t *teacher) sayLater(s string) { uithread.Do(func() { t.say(s) }) }

// setPaused pauses or resumes the scheduler, off the UI goroutine: the
// engine takes it after the step under way.
func (t *teacher) setPaused(p bool) {
	e := t.a.Engine()
	if e == nil {
		t.explain.SetText(errNoModel.Error())
		return
	}
	if t.busy != "" {
		return
	}
	cmd, doing := e.Resume, "Resuming…"
	if p {
		cmd, doing = e.Pause, "Pausing… (the step under way finishes first)"
	}
	t.busy = doing
	t.showStepButtons()
	t.explain.SetText(doing)
	go func() {
		err := cmd()
		uithread.Do(func() {
			t.busy = ""
			if err != nil {
				t.showStepButtons()
				t.explain.SetText(err.Error())
				return
			}
			if t.a.Engine() == e {
				t.paused = p
			}
			t.showStepButtons()
			if p {
				t.explain.SetText("Paused. Step runs one scheduler iteration: one batch of decode tokens and prompt chunks.")
			} else {
				t.explain.SetText("Running.")
			}
		})
	}()
}

// showStepButtons enables the step-mode buttons that apply now: none while
// a command is under way.
func (t *teacher) showStepButtons() {
	if t.busy != "" {
		t.pause.Disable()
		t.step.Disable()
		t.resume.Disable()
		return
	}
	if t.paused {
		t.pause.Disable()
		t.step.Enable()
		t.resume.Enable()
	} else {
		t.pause.Enable()
		t.step.Disable()
		t.resume.Disable()
	}
}

// doStep runs one step off the UI goroutine and explains it.
func (t *teacher) doStep() {
	e := t.a.Engine()
	if e == nil || t.busy != "" {
		return
	}
	t.busy = "Stepping…"
	t.showStepButtons()
	go func() {
		rep, err := e.Step()
		uithread.Do(func() {
			t.busy = ""
			t.showStepButtons()
			if err != nil {
				t.explain.SetText(err.Error())
				return
			}
			t.explain.SetText(fmt.Sprintf("Step %d: %s.", rep.Step, rep.Explain))
		})
	}()
}

// observe follows the engine (UI goroutine): in slow motion each step's
// explanation shows as it happens.
func (t *teacher) observe(s *engine.Snapshot) {
	if s.Paused != t.paused && t.busy == "" {
		t.paused = s.Paused
		t.showStepButtons()
	}
	if t.delay.Value > 0 && !s.Paused && s.Last.Explain != "" {
		t.explain.SetText(fmt.Sprintf("Step %d: %s.", s.Last.Step, s.Last.Explain))
	}
	if t.load != nil {
		t.loadLab.SetText(t.load.status(s))
	}
}

// loadGen runs synthetic users.
type loadGen struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	finished int
	tokens   int
	errs     int
	lastErr  string
	started  time.Time
	users    int
}

// normalTokens lists a tokenizer's ordinary text tokens, for synthetic
// prompts.
func normalTokens(tok *tokenizer.Tokenizer) []int {
	var ids []int
	for id := 0; id < tok.Size(); id++ {
		if tok.Type(id) == tokenizer.TypeNormal && strings.TrimSpace(tok.Token(id)) != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// startLoad starts users that each send requests of plen prompt tokens
// and rlen generated tokens, one after another, until stopped. A load
// already running is stopped first: there is one load at a time.
func (t *teacher) startLoad(users, plen, rlen int) error {
	e := t.a.Engine()
	if e == nil {
		return errNoModel
	}
	t.stopLoad()
	ids := normalTokens(e.Tokenizer())
	if len(ids) == 0 {
		return fmt.Errorf("the model's vocabulary has no ordinary tokens to make prompts from")
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &loadGen{cancel: cancel, started: time.Now(), users: users}
	for u := range users {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(u)+1, uint64(time.Now().UnixNano())))
			sp := sample.DefaultParams()
			for ctx.Err() == nil {
				prompt := make([]int, plen)
				for i := range prompt {
					prompt[i] = ids[rng.IntN(len(ids))]
				}
				sp.Seed = rng.Uint64()
				st, err := e.Submit(ctx, engine.Request{Tokens: prompt, MaxTokens: rlen, IgnoreEOS: true, Sampling: &sp, Label: fmt.Sprintf("user %d", u+1)})
				if err != nil {
					g.mu.Lock()
					g.errs++
					g.lastErr = err.Error()
					g.mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
					continue
				}
				n := 0
				for c := range st.C {
					if !c.Done {
						n++
					}
				}
				g.mu.Lock()
				g.finished++
				g.tokens += n
				g.mu.Unlock()
			}
		}()
	}
	t.load = g
	t.loadBtn.SetText("Stop load")
	t.loadBtn.SetIcon(theme.MediaStopIcon())
	t.loadLab.SetText(fmt.Sprintf("%d users started.", users))
	return nil
}

// status says how the load is going.
func (g *loadGen) status(s *engine.Snapshot) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	line := fmt.Sprintf("%d users: %d requests done, %s tokens generated in %s; now %d running, %d waiting, %d swapped; %.1f tokens/s.",
		g.users, g.finished, humanize.Comma(int64(g.tokens)), time.Since(g.started).Round(time.Second), s.Running, s.Waiting, s.Swapped, s.DecodeTPS)
	if g.errs > 0 {
		line += fmt.Sprintf(" %d requests refused; last: %s", g.errs, g.lastErr)
	}
	return line
}

// stopLoad stops the synthetic users (their requests are cancelled).
func (t *teacher) stopLoad() {
	if t.load == nil {
		return
	}
	t.load.cancel()
	t.load = nil
	t.loadBtn.SetText("Start load")
	t.loadBtn.SetIcon(theme.MediaPlayIcon())
	t.loadLab.SetText("Load stopped.")
}

// runPreset starts a lesson on its own goroutine, stopping the last one.
func (t *teacher) runPreset(p Preset) {
	e := t.a.Engine()
	if e == nil {
		t.say(errNoModel.Error())
		return
	}
	t.stopLesson()
	// Lessons run the scheduler: resumed on the lesson's goroutine, also
	// after a Pause under way (the engine takes commands in order).
	resume := t.paused || t.busy != ""
	if t.saved == nil {
		cfg := e.Config() // the user's settings, before any lesson's
		t.saved = &cfg
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.lessonStop, t.lessonDone = cancel, done
	t.chart.Hide()
	t.say(p.Name + ": " + p.About)
	go func() {
		defer close(done)
		if resume {
			if err := e.Resume(); err != nil {
				t.sayLater(p.Name + " stopped: " + err.Error())
				return
			}
			uithread.Do(func() {
				if t.a.Engine() == e && t.busy == "" {
					t.paused = false
					t.showStepButtons()
					t.explain.SetText("Running.")
				}
			})
		}
		if err := p.run(t, ctx, e); err != nil && ctx.Err() == nil {
			t.sayLater(p.Name + " stopped: " + err.Error())
		}
	}()
}

// stopLesson cancels the running lesson and its load.
func (t *teacher) stopLesson() {
	if t.lessonStop != nil {
		t.lessonStop()
		t.lessonStop = nil
	}
	t.stopLoad()
}

// stopAll ends everything teaching mode started.
func (t *teacher) stopAll() { t.stopLesson() }

// forgetSaved drops the settings recorded before the first lesson: a new
// engine starts on the saved settings, so there is nothing to restore.
func (t *teacher) forgetSaved() { t.saved = nil }

// restore puts the user's settings from before the first lesson back into
// the engine (the saved settings when no lesson changed them).
func (t *teacher) restore() {
	e := t.a.Engine()
	if e == nil || t.restoreBtn.Disabled() {
		return
	}
	cfg := t.a.cacheConfig()
	saved := t.saved
	if saved != nil {
		cfg = *saved
	}
	t.restoreBtn.Disable()
	t.say("Restoring your cache settings… (the engine takes them after the step under way)")
	go func() {
		err := e.Reconfigure(cfg)
		uithread.Do(func() {
			t.restoreBtn.Enable()
			if err != nil {
				t.say("Restoring the settings failed: " + err.Error())
				return
			}
			if t.saved == saved && t.a.Engine() == e {
				t.saved = nil // restored; the next lesson records afresh
			}
			t.a.controls.show(e.Config(), e.Snapshot())
			t.say("Your cache settings are back: " + describeConfig(e.Config()))
		})
	}()
}

// reconfigure applies a lesson's settings and says so.
func (t *teacher) reconfigure(e *engine.Engine, change func(c *engine.Config)) error {
	cfg := e.Config()
	change(&cfg)
	if err := e.Reconfigure(cfg); err != nil {
		return err
	}
	uithread.Do(func() { t.a.controls.show(e.Config(), e.Snapshot()) })
	return nil
}

// setMode switches the heatmap's colouring for a lesson.
func (t *teacher) setMode(m inspector.Mode) {
	uithread.Do(func() {
		t.a.insp.SetMode(m)
		t.a.tabs.SelectIndex(0)
	})
}

// timedRun generates a greedy reply and records when each token arrived.
func timedRun(ctx context.Context, e *engine.Engine, prompt string, n int, noCache bool) (text string, ms []float64, err error) {
	sp := sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}
	st, err := e.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, Sampling: &sp, NoCache: noCache, Label: "lesson"})
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	last := time.Now()
	first := true
	for c := range st.C {
		if c.Done {
			if c.Err != nil {
				return b.String(), ms, c.Err
			}
			b.WriteString(c.Text)
			continue
		}
		now := time.Now()
		if !first { // the first token's time is the prompt's prefill
			ms = append(ms, float64(now.Sub(last).Microseconds())/1000)
		}
		first = false
		last = now
		b.WriteString(c.Text)
	}
	return b.String(), ms, ctx.Err()
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// lessonCache: the same reply with the cache on, then off.
func (t *teacher) lessonCache(ctx context.Context, e *engine.Engine) error {
	const n = 64
	prompt := "Once upon a time"
	t.sayLater("Generating 64 tokens with the KV cache: each new token attends to the stored keys and values…")
	with, a, err := timedRun(ctx, e, prompt, n, false)
	if err != nil {
		return err
	}
	t.sayLater("Now the same reply without the cache: for every new token the engine recomputes the whole prefix…")
	without, b, err := timedRun(ctx, e, prompt, n, true)
	if err != nil {
		return err
	}
	same := "the same text"
	if with != without {
		same = "different text (they should match: please report it)"
	}
	q := len(b) / 4
	msg := fmt.Sprintf("With the cache: %.2f ms a token, flat. Without: %.2f ms a token over the first quarter, %.2f ms over the last, growing with position because every token recomputes all before it. Both runs gave %s.",
		mean(a), mean(b[:max(q, 1)]), mean(b[len(b)-max(q, 1):]), same)
	uithread.Do(func() {
		t.chart.set([]Series{
			{Name: "with the KV cache", Color: color.RGBA{0x4e, 0x9b, 0xf7, 0xff}, Y: a},
			{Name: "without (recompute the prefix)", Color: color.RGBA{0xe1, 0x47, 0x59, 0xff}, Y: b},
		})
		t.chart.Show()
		t.say(msg)
	})
	return nil
}

// sharedSystem is a long system prompt for the shared-prefix lesson.
const sharedSystem = "You are a kind storyteller for young children. Tell short, gentle stories with simple words, friendly animals, bright colours and a happy ending. Every story has a beginning, a middle and an end, and each sentence is easy to read aloud at bedtime."

// lessonShared: three conversations with one system prompt.
func (t *teacher) lessonShared(ctx context.Context, e *engine.Engine) error {
	t.setMode(inspector.ByRefCount)
	messages := []string{"Once upon a time, a little fox", "One day, a small blue bird", "Tom and his dog went to the park"}
	for i, m := range messages {
		type sent struct {
			id  int64
			err error
		}
		done := make(chan sent, 1)
		uithread.Do(func() {
			if err := ctx.Err(); err != nil {
				done <- sent{err: err} // stopped meanwhile: send nothing more
				return
			}
			id := t.a.chat.NewConversation()
			t.a.chat.Update(id, func(c *store.Conversation) {
				c.Title = "Shared: " + title3(m)
				c.System = sharedSystem
				c.Sampling.MaxTokens = 600
			})
			done <- sent{id, t.a.chat.SendText(id, m)}
		})
		r := <-done
		if r.err != nil {
			return r.err
		}
		if i == 0 {
			// The others come once the first's prompt is computed: only
			// computed blocks are in the prefix cache, so prompts admitted
			// in the same step would each compute the system prompt.
			if err := t.waitReplyStarted(ctx, r.id); err != nil {
				return err
			}
		}
	}
	sysTokens := len(e.Tokenizer().Encode(sharedSystem+"\n\n", true, false))
	for ctx.Err() == nil {
		s := e.Snapshot()
		shared := 0
		for _, b := range s.Cache.Blocks {
			if b.Ref > 1 {
				shared++
			}
		}
		m := s.Cache.Metrics
		t.sayLater(fmt.Sprintf("The system prompt is %d tokens: its %d full blocks are computed once. Now %d blocks are shared (ref count > 1, yellow to magenta); prefix cache: %d of %d prompt tokens hit (%.0f %%).",
			sysTokens, sysTokens/max(m.BlockSize, 1), shared, m.PrefixHitTokens, m.PrefixQueryTokens, 100*m.PrefixHitRate))
		if len(s.Requests) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil
}

// waitReplyStarted waits until conversation id's reply has its first
// token, or has ended.
func (t *teacher) waitReplyStarted(ctx context.Context, id int64) error {
	for {
		for _, c := range t.a.chat.Conversations().List {
			if c.ID == id && len(c.Messages) > 0 {
				if m := c.Messages[len(c.Messages)-1]; m.Tokens > 0 || m.Finish != "" {
					return nil
				}
			}
		}
		if err := wait(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// title3 is the first three words of s.
func title3(s string) string {
	w := strings.Fields(s)
	return strings.Join(w[:min(3, len(w))], " ")
}

// lessonParallel: n = 4 samples of one prompt.
func (t *teacher) lessonParallel(ctx context.Context, e *engine.Engine) error {
	t.setMode(inspector.ByRefCount)
	before := e.Snapshot().Cache.Metrics.CoWCopies
	sp := sample.DefaultParams()
	sp.Temperature, sp.Seed = 1, rand.Uint64()
	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside with her friends"
	st, err := e.Submit(ctx, engine.Request{Prompt: prompt, N: 4, MaxTokens: 64, Sampling: &sp, Label: "4 samples"})
	if err != nil {
		return err
	}
	texts := make([]string, 4)
	seen := false
	for c := range st.C {
		texts[c.Sample] += c.Text
		if !seen {
			seen = true
			s := e.Snapshot()
			t.sayLater(fmt.Sprintf("Four samples fork one sequence and share its %d prompt blocks (ref count 4); each one's first write into the shared last block copies it. Copies on write so far: %d.",
				(len(e.Tokenizer().Encode(prompt, true, false))+s.Cache.BlockSize-1)/s.Cache.BlockSize, s.Cache.Metrics.CoWCopies-before))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	cow := e.Snapshot().Cache.Metrics.CoWCopies - before
	var b strings.Builder
	fmt.Fprintf(&b, "Done: the prompt was computed once for four samples, and %d blocks were copied on write. The four endings:", cow)
	for i, s := range texts {
		fmt.Fprintf(&b, "\n%d. …%s", i+1, lastWords(s, 14))
	}
	t.sayLater(b.String())
	return nil
}

// lastWords returns the last n words of s.
func lastWords(s string, n int) string {
	w := strings.Fields(s)
	return strings.Join(w[max(0, len(w)-n):], " ")
}

// wait sleeps d or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// lessonSmall: a budget too small for the load.
func (t *teacher) lessonSmall(ctx context.Context, e *engine.Engine) error {
	const users, plen, rlen = 6, 64, 160
	m := e.Snapshot().Cache.Metrics
	perSeq := (plen + rlen + m.BlockSize - 1) / m.BlockSize
	budget := int64(perSeq*5/2) * int64(m.BlockBytes)
	if err := t.reconfigure(e, func(c *engine.Config) {
		c.Cache.Budget = budget
		c.Sched.MaxSeqs = max(c.Sched.MaxSeqs, users)
	}); err != nil {
		return err
	}
	t.setMode(inspector.ByRecency)
	start := e.Snapshot().Cache.Metrics
	errc := make(chan error, 1)
	uithread.Do(func() {
		if err := ctx.Err(); err != nil {
			errc <- err // stopped while reconfiguring: start nothing
			return
		}
		errc <- t.startLoad(users, plen, rlen)
	})
	if err := <-errc; err != nil {
		return err
	}
	for ctx.Err() == nil {
		s := e.Snapshot()
		x := s.Cache.Metrics
		t.sayLater(fmt.Sprintf("The pool holds %d blocks, about 2½ sequences of %d; 6 users want more. Preemptions: %d (the newest sequence gives its blocks back and is recomputed later), evictions of cached blocks: %d; %d running, %d waiting. Restore your settings when done.",
			x.TotalBlocks, perSeq, x.Preemptions-start.Preemptions, x.Evictions-start.Evictions, s.Running, s.Waiting))
		if wait(ctx, time.Second) != nil {
			break
		}
	}
	return nil
}

// lessonContiguous: the same load paged, then contiguous.
func (t *teacher) lessonContiguous(ctx context.Context, e *engine.Engine) error {
	const users, plen, rlen = 6, 32, 96
	const phase = 8 * time.Second
	s := e.Snapshot()
	perCtx := (s.Context + s.Cache.BlockSize - 1) / s.Cache.BlockSize
	budget := int64(perCtx*5/2) * int64(s.Cache.Metrics.BlockBytes)
	type result struct {
		maxRunning int
		frag       float64
	}
	measure := func(alloc kvcache.Allocator) (result, error) {
		if err := t.reconfigure(e, func(c *engine.Config) {
			c.Cache.Allocator = alloc
			c.Cache.Budget = budget
			c.Sched.MaxSeqs = max(c.Sched.MaxSeqs, users)
		}); err != nil {
			return result{}, err
		}
		errc := make(chan error, 1)
		var g *loadGen // this phase's load
		uithread.Do(func() {
			if err := ctx.Err(); err != nil {
				errc <- err // stopped while reconfiguring: start nothing
				return
			}
			err := t.startLoad(users, plen, rlen)
			g = t.load
			errc <- err
		})
		if err := <-errc; err != nil {
			return result{}, err
		}
		var r result
		var fr []float64
		end := time.Now().Add(phase)
		for time.Now().Before(end) {
			s := e.Snapshot()
			r.maxRunning = max(r.maxRunning, s.Running)
			if s.Cache.Metrics.UsedBlocks > 0 {
				fr = append(fr, s.Cache.Metrics.InternalFragmentation)
			}
			t.sayLater(fmt.Sprintf("%s allocator, %d blocks: %d sequences running, %d waiting; internal fragmentation %.0f %%.",
				alloc, s.Cache.Metrics.TotalBlocks, s.Running, s.Waiting, s.Cache.Metrics.InternalFragmentation))
			if err := wait(ctx, 300*time.Millisecond); err != nil {
				return r, err
			}
		}
		uithread.Do(func() {
			if t.load == g {
				t.stopLoad() // not a load the user started meanwhile
			}
		})
		r.frag = mean(fr)
		return r, nil
	}
	t.setMode(inspector.ByFill)
	paged, err := measure(kvcache.Paged)
	if err != nil {
		return err
	}
	contig, err := measure(kvcache.Contiguous)
	if err != nil {
		return err
	}
	t.sayLater(fmt.Sprintf("Same budget (%s), same load. Paged: up to %d sequences at once, %.0f %% of reserved slots empty. Contiguous: up to %d at once, %.0f %% empty, because each sequence reserved its whole %d-token context up front. Restore your settings to go back.",
		humanize.IBytes(uint64(budget)), paged.maxRunning, paged.frag, contig.maxRunning, contig.frag, s.Context))
	return nil
}

// lessonPrecision: one budget at f16, then int4.
func (t *teacher) lessonPrecision(ctx context.Context, e *engine.Engine) error {
	t.setMode(inspector.ByPrecision)
	s := e.Snapshot()
	budget := int64(s.Cache.Metrics.TotalBlocks) * int64(s.Cache.Metrics.BlockBytes)
	prompt := "Once upon a time, there was a little girl named Lily."
	type result struct {
		tokens   int
		perToken float64
		text     string
	}
	run := func(p kvstore.Precision) (result, error) {
		if err := t.reconfigure(e, func(c *engine.Config) { c.Cache.K, c.Cache.V, c.Cache.Budget = p, p, budget }); err != nil {
			return result{}, err
		}
		m := e.Snapshot().Cache.Metrics
		text, _, err := timedRun(ctx, e, prompt, 40, false)
		return result{tokens: m.TotalBlocks * m.BlockSize, perToken: m.BytesPerToken, text: text}, err
	}
	t.sayLater("Generating a greedy reply with f16 K/V…")
	f16, err := run(kvstore.F16)
	if err != nil {
		return err
	}
	t.sayLater("Now the same budget and prompt with int4 K/V…")
	i4, err := run(kvstore.Int4)
	if err != nil {
		return err
	}
	same := commonPrefixWords(f16.text, i4.text)
	t.sayLater(fmt.Sprintf("Budget %s. f16: %s tokens fit (%s a token). int4: %s tokens fit (%s a token), %.1f× as many. The greedy replies agree on their first %d of %d words; int4 keeps per-channel key scales, so it stays close. Restore your settings to go back.",
		humanize.IBytes(uint64(budget)), humanize.Comma(int64(f16.tokens)), humanize.IBytes(uint64(f16.perToken+0.5)),
		humanize.Comma(int64(i4.tokens)), humanize.IBytes(uint64(i4.perToken+0.5)), float64(i4.tokens)/float64(max(f16.tokens, 1)),
		same, len(strings.Fields(f16.text))))
	return nil
}

// commonPrefixWords counts the leading words two texts share.
func commonPrefixWords(a, b string) int {
	x, y := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

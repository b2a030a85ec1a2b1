package app

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvstore"
)

// Regression tests for bugs a review found, each named for the behaviour
// it pins down.

// A lesson's temporary settings (the precision lesson leaves K/V at int4)
// must not become the saved settings when the user touches a control, and
// "Restore my cache settings" must bring back the settings from before the
// lesson, with the user's own change made meanwhile.
func TestLessonSettingsStayOutOfSavedSettingsAndRestoreUndoesThem(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	var before engine.Config
	uithread.Locked(func() { before = a.Engine().Config() })
	if before.Cache.K == kvstore.Int4 || before.Cache.BlockSize == 32 {
		t.Fatalf("the default config already has K %s, block size %d: the test cannot tell the lesson's settings apart", before.Cache.K, before.Cache.BlockSize)
	}
	uithread.Locked(func() { a.teach.runPreset(Presets[5]) })
	uithread.WaitFor(t, "the precision lesson", func() bool { return strings.Contains(a.teach.lesson.Text, "as many") })
	uithread.Locked(func() { a.controls.block.OnChangeEnded(5) }) // the user moves block size 16 → 32
	uithread.WaitFor(t, "the change", func() bool { return strings.HasPrefix(a.controls.Result(), "Applied") })
	uithread.Locked(func() {
		saved := a.settings.Cache
		if saved == nil || saved.K != before.Cache.K.String() || saved.V != before.Cache.V.String() || saved.BlockSize != 32 {
			t.Errorf("saved settings after a change during the lesson: %+v; want K/V %s/%s from before it and block size 32", saved, before.Cache.K, before.Cache.V)
		}
		a.teach.restore()
	})
	uithread.WaitFor(t, "restore", func() bool { return strings.HasPrefix(a.teach.lesson.Text, "Your cache settings are back") })
	uithread.Locked(func() {
		got := a.Engine().Config().Cache
		if got.K != before.Cache.K || got.V != before.Cache.V || got.Budget != before.Cache.Budget || got.BlockSize != 32 {
			t.Errorf("after Restore: K %s / V %s, budget %d, block size %d; want K %s / V %s, budget %d from before the lesson and block size 32 from the user",
				got.K, got.V, got.Budget, got.BlockSize, before.Cache.K, before.Cache.V, before.Cache.Budget)
		}
	})
}

// The slow-motion slider's delay must be in force on the engine of a model
// opened after it was set, as the slider says.
func TestSlowMotionCarriesOverToTheNextModel(t *testing.T) {
	const delayMS, tokens = 250, 8
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() { a.teach.delay.SetValue(delayMS); a.teach.delay.OnChangeEnded(delayMS) })
	if err := a.OpenModel(stories(t)); err != nil { // switch model
		t.Fatal(err)
	}
	start := time.Now()
	uithread.Locked(func() {
		if a.teach.delay.Value != delayMS {
			t.Errorf("the slider moved to %v ms on a model switch", a.teach.delay.Value)
		}
		a.chat.Update(a.chat.Selected(), func(c *store.Conversation) { c.Sampling.MaxTokens = tokens })
		if err := a.chat.SendText(a.chat.Selected(), "Once upon a time"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "reply", func() bool { return !a.chat.Running(a.chat.Selected()) })
	uithread.Locked(func() {
		if el, want := time.Since(start), (tokens-1)*delayMS*time.Millisecond; el < want {
			t.Errorf("slider shows %q but %d tokens took %v (want at least %v): the new engine runs at full speed", a.teach.delayLab.Text, tokens, el, want)
		}
	})
}

// Starting a load while one runs (a lesson's load racing the user's
// "Start load") must stop the first: after "Stop load" nothing runs.
func TestSecondLoadStopsTheFirst(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if err := a.teach.startLoad(2, 16, 64); err != nil { // the user's load
			t.Fatal(err)
		}
		if err := a.teach.startLoad(2, 16, 64); err != nil { // a lesson's
			t.Fatal(err)
		}
		a.teach.stopLoad() // "Stop load" / "Stop the lesson"
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := a.Engine().Snapshot()
		if s.Running+s.Waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after Stop load: %d running, %d waiting requests: the first load's users still run", s.Running, s.Waiting)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A lesson stopped while it reconfigures the engine must not start its
// load afterwards: nothing would ever stop it.
func TestStoppedLessonStartsNoLoad(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Budget too small", "Paged vs contiguous"} {
		var p Preset
		for _, q := range Presets {
			if q.Name == name {
				p = q
			}
		}
		if p.run == nil {
			t.Fatalf("no preset %q", name)
		}
		var done chan struct{}
		uithread.Locked(func() {
			// The lesson's goroutine cannot reach its uithread.Do before
			// this returns, so the stop always comes first.
			a.teach.runPreset(p)
			done = a.teach.lessonDone
			a.teach.stopLesson()
		})
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the stopped lesson did not end", name)
		}
		uithread.Locked(func() {
			if a.teach.load != nil {
				a.teach.stopLoad()
				t.Errorf("%s: a load runs after the lesson was stopped", name)
			}
		})
	}
}

// The inspector's sequence names and owner colours must follow the live
// sequences, not keep every sequence ever seen, and start empty on a new
// model.
func TestSequenceNamesFollowLiveSequences(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if err := a.teach.startLoad(4, 8, 4); err != nil {
			t.Fatal(err)
		}
	})
	time.Sleep(3 * time.Second)
	var finished int
	uithread.Locked(func() {
		a.teach.load.mu.Lock()
		finished = a.teach.load.finished
		a.teach.load.mu.Unlock()
		a.teach.stopLoad()
	})
	if finished < 20 {
		t.Fatalf("only %d requests finished in 3 s: too few to tell", finished)
	}
	uithread.WaitFor(t, "the load to drain", func() bool {
		s := a.Engine().Snapshot()
		return s.Running+s.Waiting == 0 && a.lastSeq != nil && len(a.lastSeq.Requests) == 0
	})
	uithread.Locked(func() {
		live := len(a.lastSeq.Cache.Seqs)
		if len(a.names) > live || len(a.groups) > live {
			t.Errorf("%d names and %d groups kept after %d requests; %d sequences alive", len(a.names), len(a.groups), finished, live)
		}
		a.names[12345], a.groups[12345] = "stale", 1 // as if left by the last model
	})
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if _, ok := a.names[12345]; ok {
			t.Error("a sequence name survived the model switch")
		}
		if _, ok := a.groups[12345]; ok {
			t.Error("a sequence group survived the model switch")
		}
	})
}

// Loading a model must not read the settings or write the problems off the
// UI goroutine while the controls change them (run with -race); the
// fallback's problem still reaches the status line.
func TestLoadDoesNotRaceTheUI(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	uithread.Locked(func() { a.settings.Cache = &store.Cache{BlockSize: 1 << 20} }) // refused: fallback path
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- a.OpenModel(stories(t)) }()
	}
	for range 50 {
		uithread.Locked(func() { a.controls.block.OnChangeEnded(3) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	uithread.Locked(func() {
		if a.Engine() == nil {
			t.Fatal("no engine after the loads")
		}
		if len(a.problems) != 0 {
			t.Errorf("problems left untold: %q", a.problems)
		}
	})
}

// The fallback's problem (saved settings this model cannot take) is told in
// the status line.
func TestUnsuitableSavedSettingsAreTold(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	uithread.Locked(func() { a.settings.Cache = &store.Cache{BlockSize: 1 << 20} })
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if !strings.Contains(a.status.Text, "do not suit") || a.Engine().Config().Cache.BlockSize != engine.DefaultConfig().Cache.BlockSize {
			t.Errorf("status %q, block size %d", a.status.Text, a.Engine().Config().Cache.BlockSize)
		}
	})
}

// A budget that makes more than engine.MaxBlocks blocks is refused with the
// engine's reason, like other refusals, and the controls go back to the
// settings in force.
func TestHugePoolIsRefusedWithTheReason(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	var before engine.Config
	uithread.Locked(func() {
		before = a.Engine().Config()
		a.controls.budget.OnChangeEnded(float64(len(Budgets) - 1))
		a.controls.block.OnChangeEnded(0)
	})
	uithread.WaitFor(t, "the refusal", func() bool {
		return !a.controls.Busy() && len(a.controls.queued) == 0
	})
	uithread.Locked(func() {
		if r, want := a.controls.Result(), fmt.Sprintf("at most %d blocks", engine.MaxBlocks); !strings.HasPrefix(r, "Refused:") || !strings.Contains(r, want) {
			t.Errorf("result %q; want a refusal saying %q", r, want)
		}
		if got := a.Engine().Config(); got.Cache.Budget != before.Cache.Budget || got.Cache.BlockSize != before.Cache.BlockSize {
			t.Errorf("engine at budget %d, block size %d; want %d, %d unchanged", got.Cache.Budget, got.Cache.BlockSize, before.Cache.Budget, before.Cache.BlockSize)
		}
		if BlockSizes[int(a.controls.block.Value)] != before.Cache.BlockSize || a.controls.budgetLab.Text != budgetText(before.Cache.Budget) {
			t.Errorf("controls show block size %d, budget %s; want the settings in force", BlockSizes[int(a.controls.block.Value)], a.controls.budgetLab.Text)
		}
		if n := len(a.Engine().Snapshot().Cache.Blocks); n > engine.MaxBlocks {
			t.Errorf("%d blocks in the pool, over %d", n, engine.MaxBlocks)
		}
	})
}

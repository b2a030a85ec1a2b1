package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"kvscope/app/inspector"
	"kvscope/app/lesson"
	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/internal/testshared"
)

// newApp builds the window in a test app, keeping its files in dir.
func newApp(t *testing.T, dir string) (*App, fyne.Window) {
	t.Helper()
	fa := test.NewTempApp(t)
	var a *App
	var w fyne.Window
	uithread.Locked(func() {
		w = test.NewTempWindow(t, nil)
		w.Resize(fyne.NewSize(1280, 800))
		var err error
		a, err = New(fa, w, dir)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { uithread.Locked(a.Close) })
	return a, w
}

func stories(t *testing.T) string { return testshared.Path(t, "models/stories260K.gguf") }

func TestFirstRunScreenThenModel(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	uithread.Locked(func() {
		if a.content.Objects[0] != a.firstRun {
			t.Error("without a model the window does not show the first-run screen")
		}
	})
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if a.content.Objects[0] != a.main {
			t.Error("after opening a model the window still shows the first-run screen")
		}
		if a.modelBtn.Text == "Model" || len(a.info.Items) == 0 {
			t.Errorf("model button %q, %d info rows", a.modelBtn.Text, len(a.info.Items))
		}
		if a.settings.LastModel != stories(t) || a.settings.RecentModels[0] != stories(t) {
			t.Errorf("settings remember %q, recent %v", a.settings.LastModel, a.settings.RecentModels)
		}
	})
	if err := a.OpenModel(filepath.Join(t.TempDir(), "missing.gguf")); err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Errorf("opening a missing file: %v", err)
	}
}

func TestDemoModelSaysItIsGibberish(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if c := chatContext(a); c == "" || c == "context: no model" {
			t.Fatalf("on the demo model the chat pane says %q, want its context use", c)
		}
		info := ""
		for _, it := range a.info.Items {
			info += it.Text + " "
		}
		if !strings.Contains(a.mdl.note(), "gibberish") || !strings.Contains(a.mdl.note(), "random weights") {
			t.Errorf("demo note %q does not say the text is gibberish", a.mdl.note())
		}
		if n := a.Engine().Snapshot().Cache.Metrics.TotalBlocks; n < 1000 {
			t.Errorf("demo pool has %d blocks, want a heatmap-filling pool (1000+)", n)
		}
	})
}

func TestBlockSizeSliderReconfiguresTheEngine(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if a.Engine().Config().Cache.BlockSize != 16 {
			t.Fatalf("block size %d before the test, want 16", a.Engine().Config().Cache.BlockSize)
		}
		// Drag the slider's knob one stop right: 16 → 32 tokens.
		a.tabs.Select(a.tabControls)
		s := a.controls.block
		if s.Size().Width < 50 {
			t.Fatalf("slider is %v wide", s.Size())
		}
		// Press on the knob (value 4 of 0…8, the middle) and drag it right
		// by one stop's width: 16 → 32 tokens.
		mid := fyne.NewPos(s.Size().Width/2, s.Size().Height/2)
		stop := s.Size().Width / 9
		s.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: mid}, Dragged: fyne.NewDelta(0, 0)})
		s.Dragged(&fyne.DragEvent{PointEvent: fyne.PointEvent{Position: mid.Add(fyne.NewPos(stop, 0))}, Dragged: fyne.NewDelta(stop, 0)})
		s.DragEnd()
		if s.Value != 5 {
			t.Fatalf("the slider is at stop %v after the drag, want 5", s.Value)
		}
	})
	uithread.WaitFor(t, "the reconfiguration", func() bool { return strings.HasPrefix(a.controls.Result(), "Applied") })
	uithread.Locked(func() {
		if got := a.Engine().Config().Cache.BlockSize; got != 32 {
			t.Errorf("engine block size %d after the slider moved, want 32 (result: %s)", got, a.controls.Result())
		}
		if a.settings.Cache == nil || a.settings.Cache.BlockSize != 32 {
			t.Errorf("saved settings %+v, want block size 32", a.settings.Cache)
		}
	})
	uithread.WaitFor(t, "a snapshot of the new pool", func() bool {
		s := a.insp.Snapshot()
		return s != nil && s.BlockSize == 32
	})
}

func TestImpossibleSettingIsRefusedWithTheReason(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		a.controls.k.SetSelected("f32")
		a.controls.v.SetSelected("f32")
	})
	uithread.WaitFor(t, "f32", func() bool { return a.Engine().Config().Cache.V.String() == "f32" })
	uithread.Locked(func() {
		a.controls.block.SetValue(float64(len(BlockSizes) - 1)) // 256 tokens
	})
	uithread.WaitFor(t, "256", func() bool { return a.Engine().Config().Cache.BlockSize == 256 })
	uithread.Locked(func() {
		a.controls.budget.SetValue(1) // 256 KiB: less than one 256-token f32 block
	})
	uithread.WaitFor(t, "the refusal", func() bool {
		if strings.HasPrefix(a.controls.Result(), "Refused") {
			return true
		}
		t.Logf("result %q, engine %s", a.controls.Result(), describeConfig(a.Engine().Config()))
		return false
	})
	uithread.Locked(func() {
		if r := a.controls.Result(); !strings.Contains(r, "holds no block") {
			t.Errorf("refusal %q does not give the reason", r)
		}
		if b := a.Engine().Config().Cache.Budget; b != 0 {
			t.Errorf("engine budget %d after a refused change, want the old automatic 0", b)
		}
		if a.controls.budget.Value != 0 || a.controls.budgetLab.Text != "auto" {
			t.Errorf("budget control shows %v %q, want it back on auto", a.controls.budget.Value, a.controls.budgetLab.Text)
		}
	})
}

func TestChatFeedsTheInspector(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		id := a.chat.Selected()
		a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 300 })
		test.Type(chatComposer(t, a), "Once upon a time")
		test.Tap(chatSend(t, a))
	})
	uithread.WaitFor(t, "the inspector to show the conversation's blocks", func() bool {
		s := a.insp.Snapshot()
		return s != nil && s.Metrics.UsedBlocks > 0 && strings.Contains(strings.Join(a.insp.Log.Lines(), "\n"), "allocated")
	})
	uithread.Locked(func() {
		s := a.insp.Snapshot()
		name := ""
		for _, q := range s.Seqs {
			name = a.seqName(q.ID)
		}
		if !strings.HasPrefix(name, "conversation ") {
			t.Errorf("the inspector names the sequence %q, want its conversation", name)
		}
		a.chat.Stop(a.chat.Selected())
	})
}

func TestStepModeExplains(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() { test.Tap(a.teach.pause) })
	uithread.WaitFor(t, "the pause", func() bool { return a.teach.paused && a.teach.busy == "" })
	uithread.Locked(func() {
		a.chat.Update(a.chat.Selected(), func(c *store.Conversation) { c.Sampling.MaxTokens = 20 })
		if err := a.chat.SendText(a.chat.Selected(), "Once upon a time"); err != nil {
			t.Fatal(err)
		}
	})
	time.Sleep(100 * time.Millisecond)
	uithread.Locked(func() {
		if m := a.chat.Conversations().List[0].Messages[1]; m.Tokens != 0 {
			t.Errorf("%d tokens generated while paused", m.Tokens)
		}
		test.Tap(a.teach.step)
	})
	uithread.WaitFor(t, "the step's explanation", func() bool { return strings.HasPrefix(a.teach.explain.Text, "Step ") })
	uithread.Locked(func() {
		if !strings.Contains(a.teach.explain.Text, "prompt tokens") {
			t.Errorf("step explanation %q", a.teach.explain.Text)
		}
		test.Tap(a.teach.resume)
	})
	uithread.WaitFor(t, "the reply after resuming", func() bool { return a.chat.Conversations().List[0].Messages[1].Finish != "" })
}

func TestLoadGeneratorShowsWhatRuns(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		if err := a.teach.load.start(lesson.Load{Users: 3, Prompt: 16, Reply: 8}); err != nil {
			t.Fatal(err)
		}
		if a.teach.load.users.Value != 3 || a.teach.load.plen.Value != 16 || a.teach.load.rlen.Value != 8 {
			t.Errorf("the sliders show %v users, %v and %v tokens; the load is 3, 16 and 8", a.teach.load.users.Value, a.teach.load.plen.Value, a.teach.load.rlen.Value)
		}
	})
	uithread.WaitFor(t, "synthetic requests", func() bool {
		return a.teach.load.g != nil && strings.Contains(a.teach.load.lab.Text, "3 users, prompts of 16 tokens, replies of 8 tokens: ") &&
			!strings.Contains(a.teach.load.lab.Text, ": 0 requests done")
	})
	uithread.Locked(a.teach.load.stop)
}

// playLesson plays l through the Teaching tab, pressing Next whenever the
// bar offers it, and returns the figures the bar showed.
func playLesson(t *testing.T, a *App, l *lesson.Lesson) string {
	t.Helper()
	uithread.Locked(func() {
		a.tabs.Select(a.tabTeaching)
		a.teach.lessons.start(l)
		if a.tabs.Selected() != a.tabInspector || !a.teach.lessons.bar.Visible() {
			t.Errorf("%s: the lesson's bar is not shown beside the heatmap", l.Name)
		}
	})
	var figures string
	uithread.WaitFor(t, l.Name, func() bool {
		v := a.teach.lessons
		if !v.next.Disabled() {
			test.Tap(v.next)
		}
		if v.run != nil {
			figures = strings.Join(v.run.lines, "\n")
		}
		return v.run != nil && v.run.ended
	})
	return figures
}

// TestLessonsInTheWindow plays lessons through the Teaching tab: the bar
// shows each step and its figure beside the heatmap, Next goes on, the
// lesson's chats never become conversations, the user's selection and
// heatmap mode come back, and so do the user's settings.
func TestLessonsInTheWindow(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	var before engine.Config
	var convs int
	uithread.Locked(func() {
		before = a.Engine().Config()
		convs = len(a.chat.Conversations().List)
		a.insp.SetMode(inspector.ByLocation)
	})
	for _, l := range []*lesson.Lesson{lesson.CacheBuys, lesson.SharedPrompt, lesson.Parallel} {
		figs := playLesson(t, a, l)
		uithread.Locked(func() {
			if n := strings.Count(figs, "✓"); n != len(l.Steps) || strings.Contains(figs, "✗") {
				t.Errorf("%s: the bar shows %q", l.Name, figs)
			}
			if !strings.Contains(a.teach.lessons.title.Text, "done") {
				t.Errorf("%s: title %q at the end", l.Name, a.teach.lessons.title.Text)
			}
			if c := a.teach.lessons.chart; l == lesson.CacheBuys && (!c.Visible() || !strings.HasSuffix(c.yTop.Text, " ms") || c.yTop.Text == "1 ms") {
				t.Errorf("the cache lesson's chart: shown %v, y axis up to %q", c.Visible(), c.yTop.Text)
			}
			if got := a.Engine().Config(); !reflect.DeepEqual(got, before) {
				t.Errorf("after %s the settings are %+v, not %+v", l.Name, got, before)
			}
			if n := len(a.chat.Conversations().List); n != convs {
				t.Errorf("after %s there are %d conversations, %d before: a lesson's chats became conversations", l.Name, n, convs)
			}
			if m := a.insp.Heatmap.Mode(); m != inspector.ByLocation {
				t.Errorf("after %s the heatmap shows %s, not the user's %s", l.Name, m, inspector.ByLocation)
			}
		})
	}
	uithread.Locked(func() {
		test.Tap(a.teach.lessons.stopBtn) // "Close"
		if a.teach.lessons.bar.Visible() {
			t.Error("Close leaves the lesson's bar")
		}
	})
}

// TestLessonModesExist: every lesson names a heatmap mode the inspector
// has.
func TestLessonModesExist(t *testing.T) {
	for _, l := range lesson.All {
		if _, err := inspector.ParseMode(l.Mode); err != nil {
			t.Errorf("%s: %v", l.Name, err)
		}
	}
}

func TestCorruptSettingsAreReported(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, store.SettingsFile), []byte("{not json"), 0o644)
	a, _ := newApp(t, dir)
	uithread.Locked(func() {
		if !strings.Contains(a.status.Text, "set aside") {
			t.Errorf("status %q does not report the corrupt settings", a.status.Text)
		}
	})
	matches, _ := filepath.Glob(filepath.Join(dir, store.SettingsFile+".corrupt-*"))
	if len(matches) != 1 {
		t.Errorf("set-aside files %v, want one", matches)
	}
}

func TestEngineConfigFromSettings(t *testing.T) {
	cfg, err := engineConfig(&store.Cache{BlockSize: 32, K: "int4", V: "q8_0", Eviction: "lfu", Preempt: "swap", Allocator: "contiguous", Overflow: "rolling", MaxSeqs: 3})
	if err != nil {
		t.Fatal(err)
	}
	back := cacheSettings(cfg)
	if back.BlockSize != 32 || back.K != "int4" || back.V != "q8_0" || back.Eviction != "lfu" || back.Preempt != "swap" ||
		back.Allocator != "contiguous" || back.Overflow != "rolling" || back.MaxSeqs != 3 {
		t.Errorf("round trip gave %+v", back)
	}
	if _, err := engineConfig(&store.Cache{K: "int3"}); err == nil || !strings.Contains(err.Error(), "int3") {
		t.Errorf("bad precision: %v", err)
	}
}

// TestLessonStopsTheUsersReplies: a lesson starts clean: the user's
// replies under way stop (their text stays), and a selected sequence no
// longer dims the heatmap.
func TestLessonStopsTheUsersReplies(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	id := int64(0)
	uithread.Locked(func() {
		id = a.chat.Selected()
		a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 1500 })
		if err := a.chat.SendText(id, "Once upon a time"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the reply", func() bool {
		m := a.chat.Conversations().List[0].Messages
		return len(m) == 2 && m[1].Tokens > 5
	})
	uithread.Locked(func() {
		a.insp.Select(1, true)
		a.teach.lessons.start(lesson.Parallel)
		if _, ok := a.insp.Heatmap.Selected(); ok {
			t.Error("the user's selection stays while a lesson runs")
		}
		if !strings.Contains(a.teach.lessons.explain.Text, "1 reply stopped") {
			t.Errorf("the bar says %q", a.teach.lessons.explain.Text)
		}
	})
	uithread.WaitFor(t, "the user's reply to stop", func() bool { return !a.chat.Running(id) })
	uithread.Locked(func() {
		if m := a.chat.Conversations().List[0].Messages[1]; m.Text == "" {
			t.Error("the stopped reply lost its text")
		}
		a.teach.lessons.stop()
	})
	uithread.WaitFor(t, "the lesson to stop", func() bool { return a.teach.lessons.run.ended })
}

// TestOpeningABrokenModelSaysWhy: a malformed file is refused with the
// reader's reason and the model in use stays.
func TestOpeningABrokenModelSaysWhy(t *testing.T) {
	dir := t.TempDir()
	a, _ := newApp(t, dir)
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	before := a.Engine()
	broken := filepath.Join(dir, "broken.gguf")
	if err := os.WriteFile(broken, []byte("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := a.OpenModel(broken)
	if err == nil || !strings.Contains(err.Error(), "malformed GGUF") {
		t.Fatalf("opening a broken file: %v", err)
	}
	if a.Engine() != before {
		t.Error("a failed open replaced the model in use")
	}
}

// One kvscope per data folder: a second window on the folder is refused
// with the folder's name and touches nothing there; the first removed the
// temporary files a crashed save left; after Close the folder is free.
func TestSecondInstanceIsRefused(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, store.ConversationsFile+".tmp-123")
	if err := os.WriteFile(stale, []byte("{half a save"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _ := newApp(t, dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale temporary file is still there (%v)", err)
	}
	// The chat pane's saver writes the new window's first conversation.
	uithread.WaitFor(t, "the conversations to be saved", func() bool {
		_, err := os.Stat(filepath.Join(dir, store.ConversationsFile))
		return err == nil
	})
	before := listDir(t, dir)

	fa := test.NewTempApp(t)
	uithread.Locked(func() {
		w := test.NewTempWindow(t, nil)
		b, err := New(fa, w, dir)
		var inUse *store.InUseError
		if !errors.As(err, &inUse) || b != nil {
			t.Fatalf("a second window on the folder: %v, %v; want an *store.InUseError", b, err)
		}
		if want := "kvscope is already running with data folder " + dir; err.Error() != want {
			t.Errorf("the refusal says %q, want %q", err, want)
		}
	})
	if after := listDir(t, dir); after != before {
		t.Errorf("the refused window changed the folder:\nbefore %s\nafter  %s", before, after)
	}
	uithread.Locked(a.Close)
	b, _ := newApp(t, dir)
	uithread.Locked(func() {
		if len(b.chat.Conversations().List) == 0 {
			t.Error("the next window lost the conversations")
		}
	})
}

// listDir describes a folder's files: names, sizes and times.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %s; ", e.Name(), fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
	}
	return b.String()
}

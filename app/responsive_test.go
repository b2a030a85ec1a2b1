package app

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
	"kvscope/engine/kvcache"
)

// uiLimit is the longest a call on the UI goroutine may wait: a window
// that waits longer stutters.
const uiLimit = 50 * time.Millisecond

// uiFrame is the function under which uiTimer runs each UI call.
const uiFrame = "kvscope/app.(*uiTimer).measure.func1"

// uiTimer runs calls the way the UI goroutine would (under the UI lock),
// times them, and fails the test for any that waits over uiLimit.
//
// Waiting is what the goroutine spent blocked (on a channel, a select, a
// mutex, a condition: what a call into the engine that waits for its step
// does), summed from the runtime's block profile over the call's stacks.
// Wall time would also count the CPU the call needs, which -race and a
// loaded two-core machine stretch far beyond what a window shows (Fyne
// re-lays out every tab's content on a tab switch); the wall times are
// logged.
type uiTimer struct {
	t          *testing.T
	worstWall  time.Duration
	worstWait  time.Duration
	wallWhat   string
	waitWhat   string
	calls      int
	cyclesPerS float64

	// e and working, when set, tell which calls ran inside one engine
	// step: working reports (under the UI lock) that a request is being
	// computed, and the engine publishes no new snapshot until its step
	// ends.
	e          *engine.Engine
	working    func() bool
	duringStep int
	lastInStep bool // the last call ran inside one step
}

// newUITimer starts the block profile, for the test's life.
func newUITimer(t *testing.T) *uiTimer {
	runtime.SetBlockProfileRate(1)
	t.Cleanup(func() { runtime.SetBlockProfileRate(0) })
	return &uiTimer{t: t}
}

// blocked returns how long goroutines have been blocked under uiFrame,
// in all, since the block profile started.
func (u *uiTimer) blocked() time.Duration {
	var buf bytes.Buffer
	if err := pprof.Lookup("block").WriteTo(&buf, 1); err != nil {
		u.t.Fatal(err)
	}
	var total float64
	var cycles float64
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			u.cyclesPerS, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
		case line != "" && line[0] >= '0' && line[0] <= '9': // "cycles count @ pcs": a new record
			cycles, _ = strconv.ParseFloat(strings.Fields(line)[0], 64)
		case strings.HasPrefix(line, "#") && strings.Contains(line, uiFrame):
			total += cycles
			cycles = 0 // count a record once
		}
	}
	if u.cyclesPerS <= 0 {
		u.t.Fatal("the block profile gives no cycles/second")
	}
	return time.Duration(total / u.cyclesPerS * float64(time.Second))
}

// measure runs f as one UI call and returns its wall time and how long it
// waited.
func (u *uiTimer) measure(f func()) (wall, waited time.Duration) {
	before := u.blocked()
	var s0 *engine.Snapshot
	if u.e != nil {
		s0 = u.e.Snapshot()
	}
	working := false
	uithread.Locked(func() {
		start := time.Now()
		f()
		wall = time.Since(start)
		working = u.working != nil && u.working()
	})
	u.lastInStep = u.e != nil && working && !s0.Paused && u.e.Snapshot() == s0
	if u.lastInStep {
		u.duringStep++
	}
	return wall, u.blocked() - before
}

// do runs f as one UI call named what and fails the test if it waited
// over uiLimit.
func (u *uiTimer) do(what string, f func()) {
	u.t.Helper()
	wall, waited := u.measure(f)
	u.calls++
	if wall > u.worstWall {
		u.worstWall, u.wallWhat = wall, what
	}
	if waited > u.worstWait {
		u.worstWait, u.waitWhat = waited, what
	}
	if waited > uiLimit {
		u.t.Errorf("%s waited %v on the UI goroutine (%v in all), over %v: the window froze", what, waited.Round(time.Millisecond), wall.Round(time.Millisecond), uiLimit)
	}
}

// until keeps the window busy (switching tabs, each switch a UI call)
// until cond holds, failing after 15 minutes (a hang guard: a long
// prefill step under -race on a busy two-core machine took over five), or
// as soon as the engine has lost a request (lost).
func (u *uiTimer) until(what string, tabs interface{ SelectIndex(int) }, cond func() bool) {
	u.t.Helper()
	deadline := time.Now().Add(15 * time.Minute)
	var seen *engine.Snapshot // a snapshot that showed a lost request
	for i := 0; ; i++ {
		ok := false
		u.do("switching tabs while waiting for "+what, func() {
			tabs.SelectIndex(i % 4)
			ok = cond()
		})
		if ok {
			return
		}
		if time.Now().After(deadline) {
			u.t.Fatalf("timed out waiting for %s", what)
		}
		if u.e != nil && i%100 == 99 {
			// Once (2026-12-07, a fresh clone's make test) this test
			// waited for the short reply past the guard, its request
			// live and the engine's goroutine idle; 40 runs of it alone
			// did not do it again. Two looks seconds apart that find the
			// engine so fail with its events.
			if s := u.e.Snapshot(); lost(s) && seen != nil {
				u.t.Fatalf("waiting for %s: the engine holds %d live requests %+v but nothing waits, runs or is swapped out (paused %v), and it is idle; its events:\n%s",
					what, len(s.Requests), s.Requests, s.Paused, eventLog(u.e))
			} else if lost(s) {
				seen = s
			} else {
				seen = nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lost reports whether snapshot s shows requests the scheduler no longer
// holds while it is not paused: the engine would never end them.
func lost(s *engine.Snapshot) bool {
	return s != nil && !s.Paused && len(s.Requests) > 0 && s.Waiting+s.Running+s.Swapped == 0
}

// eventLog returns e's events, one a line.
func eventLog(e *engine.Engine) string {
	evs, _, _ := e.Events(0, 1<<20)
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%d step %d %s request %d seq %d: %s\n", ev.ID, ev.Step, ev.Kind, ev.Request, ev.Seq, ev.Text)
	}
	return b.String()
}

// longPrompt returns text that is n tokens long on e's tokenizer.
func longPrompt(t *testing.T, e *engine.Engine, n int) string {
	t.Helper()
	tok := e.Tokenizer()
	words := strings.Fields(strings.Repeat("Once upon a time there was a little cat who liked to play in the park with her friends every day. ", n/10))
	lo, hi := 0, len(words)
	for lo < hi { // the fewest words that make n tokens
		mid := (lo + hi) / 2
		if len(tok.Encode(strings.Join(words[:mid], " "), true, true)) < n {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	text := strings.Join(words[:lo], " ")
	if got := len(tok.Encode(text, true, true)); got < n || got > n+2 {
		t.Fatalf("the prompt is %d tokens, want %d", got, n)
	}
	return text
}

// TestWindowNeverWaitsOnTheEngine starts a 2,000-token prefill on the demo
// model, in steps of the scheduler's 512-token budget that take seconds
// under -race, and while it runs drives the window: tabs, a Controls change
// and another while it applies, the slow-motion slider, a message in
// another conversation, typing, and Pause, Step and Resume in Teaching.
// No call on the UI goroutine may take over uiLimit; each command shows it
// is under way, a second click does not pile up another, and each lands.
func TestWindowNeverWaitsOnTheEngine(t *testing.T) {
	const promptTokens = 2000
	// The Go backend: under -race its prefill steps take seconds, so that
	// the window is driven while they run (the native library's steps
	// end before the test can pause and step them).
	t.Setenv("KVSCOPE_BACKEND", "go")
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	e := a.Engine()
	if st := e.Config().Sched.StepTokens; st*2 > promptTokens {
		t.Fatalf("step budget %d tokens: a %d-token prefill would not take several steps", st, promptTokens)
	}
	prompt := longPrompt(t, e, promptTokens)
	u := newUITimer(t)
	// The measure sees a call that waits: one that waits for the engine
	// (Pause, while idle: the engine's goroutine answers at once), and one
	// that waits uiLimit. The engine's answer can be there before the
	// caller looks for it, and then the caller never blocks (once in 20
	// runs both of one Pause and Resume did): ten of each block at least
	// once.
	if _, waited := u.measure(func() { <-time.After(2 * uiLimit) }); waited < 2*uiLimit*9/10 {
		t.Fatalf("a call that waited %v measures %v: the measure is broken", 2*uiLimit, waited)
	}
	if _, waited := u.measure(func() {
		for range 10 {
			e.Pause()
			e.Resume()
		}
	}); waited <= 0 {
		t.Fatalf("calls into the engine that wait for its goroutine measure %v", waited)
	}

	long := a.chat.Selected()
	u.e, u.working = e, func() bool { return a.chat.Running(long) }
	var composer *widget.Entry
	var send *widget.Button
	uithread.Locked(func() {
		composer, send = chatComposer(t, a), chatSend(t, a)
		a.chat.Update(long, func(c *store.Conversation) { c.Sampling.MaxTokens = 4 })
		composer.SetText(prompt) // the user's typing: many calls, not one
	})
	u.do("sending the 2,000-token message", func() { test.Tap(send) })
	u.do("selecting the Controls tab", func() { a.tabs.SelectIndex(1) })

	// A Controls change waits for the step under way: it shows that, and
	// the next change waits for it, as one more Reconfigure, not a pile.
	u.do("changing the eviction policy", func() {
		a.controls.eviction.SetSelected(kvcache.LFU.String())
		if !a.controls.Busy() || !strings.HasPrefix(a.controls.Result(), "Applying") {
			t.Errorf("the change shows %q (busy %v), want it applying", a.controls.Result(), a.controls.Busy())
		}
	})
	var first *flight
	uithread.Locked(func() { first = a.controls.flight })
	for _, p := range []string{"fifo", "lru", "fifo"} {
		u.do("changing the eviction policy again while it applies", func() { a.controls.eviction.SetSelected(p) })
	}
	uithread.Locked(func() {
		// While the first change is in flight, the others wait on it. (It
		// may land between two calls, if its step ends: then the rest go
		// as the next Reconfigure, and there is nothing to count here.)
		if first == nil || a.controls.flight != first {
			t.Logf("the first change landed before the check: not counting the queued ones")
			return
		}
		if r := a.controls.Result(); !strings.Contains(r, "3 more changes") {
			t.Errorf("three changes made while one applies show %q", r)
		}
	})
	u.do("moving the slow-motion slider", func() { a.teach.delay.SetValue(25) })
	u.do("moving the slow-motion slider again", func() { a.teach.delay.SetValue(50) })

	// Another conversation starts while the long prompt is prefilled.
	var short int64
	u.do("starting a new conversation", func() { short = a.chat.NewConversation() })
	uithread.Locked(func() { a.chat.Update(short, func(c *store.Conversation) { c.Sampling.MaxTokens = 4 }) })
	u.do("typing a message", func() { test.Type(composer, "Tom and his dog") })
	u.do("sending it", func() { test.Tap(send) })
	uithread.Locked(func() {
		if !a.chat.Running(short) || chatError(a) != "" {
			t.Errorf("the second message did not start: running %v, status %q", a.chat.Running(short), chatError(a))
		}
	})

	// Pause waits for the step under way: the buttons say so meanwhile,
	// and a second click does nothing.
	u.do("selecting the Teaching tab", func() { a.tabs.SelectIndex(2) })
	u.do("tapping Pause", func() {
		test.Tap(a.teach.pause)
		// The Pause cannot have answered: its answer needs the UI lock.
		if !a.teach.pause.Disabled() || !a.teach.step.Disabled() || !a.teach.resume.Disabled() || !strings.HasPrefix(a.teach.explain.Text, "Pausing") {
			t.Errorf("while pausing: explain %q, buttons disabled %v %v %v; want all disabled", a.teach.explain.Text,
				a.teach.pause.Disabled(), a.teach.step.Disabled(), a.teach.resume.Disabled())
		}
	})
	u.do("tapping Pause again", func() {
		test.Tap(a.teach.pause)
		if !a.teach.pause.Disabled() {
			t.Error("Pause is enabled while pausing or paused")
		}
	})
	u.until("the pause", a.tabs, func() bool { return a.teach.paused && a.teach.busy == "" })
	u.until("the Controls changes", a.tabs, func() bool { return !a.controls.Busy() })
	uithread.Locked(func() {
		if r := a.controls.Result(); !strings.HasPrefix(r, "Applied") || !strings.Contains(r, "fifo eviction") {
			t.Errorf("after the changes: %q, want the last one (fifo) applied", r)
		}
		if got := a.Engine().Config().Cache.Eviction; got != kvcache.FIFO {
			t.Errorf("engine eviction %v, want fifo", got)
		}
		if a.teach.delayBusy {
			t.Error("the slow-motion delay is still on its way")
		}
	})

	// Step runs one long prefill step off the UI goroutine.
	u.do("tapping Step", func() { test.Tap(a.teach.step) })
	u.do("typing while the step runs", func() { test.Type(composer, "Never lost") })
	u.until("the step", a.tabs, func() bool { return strings.HasPrefix(a.teach.explain.Text, "Step ") })
	uithread.Locked(func() {
		if x := a.teach.explain.Text; !strings.Contains(x, " prompt tokens") {
			t.Errorf("the step says %q, want what it ran", x)
		}
	})
	if u.duringStep < 5 {
		t.Errorf("only %d of %d UI calls ran inside an engine step: the steps are too short for this test (raise the step budget)", u.duringStep, u.calls)
	}

	// Stop the long reply (its prefill would take minutes more under
	// -race), resume, and the short one finishes.
	u.do("stopping the long reply", func() { a.chat.Stop(long) })
	u.do("tapping Resume", func() { test.Tap(a.teach.resume) })
	u.until("the resume", a.tabs, func() bool { return !a.teach.paused && a.teach.busy == "" })
	u.until("the short reply", a.tabs, func() bool { return !a.chat.Running(short) })
	uithread.Locked(func() {
		for _, c := range a.chat.Conversations().List {
			if c.ID == short {
				if c.Draft != "Never lost" {
					t.Errorf("the draft typed during the step is %q", c.Draft)
				}
				if m := c.Messages[1]; m.Finish == "" || m.Finish == "error" {
					t.Errorf("the short reply ended %q (%s)", m.Finish, m.Error)
				}
			}
		}
	})
	t.Logf("%d UI calls, %d inside a step; the longest wait %v (%s); the longest call %v (%s)", u.calls, u.duringStep,
		u.worstWait.Round(time.Microsecond), u.waitWhat, u.worstWall.Round(time.Millisecond), u.wallWhat)
}

package app

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"kvscope/app/lesson"
	"kvscope/app/uithread"
	"kvscope/engine/kvstore"
)

// cell reads a capacity cell's number.
func cell(t *testing.T, a *App, p kvstore.Precision, bs int) (n int, marked bool) {
	t.Helper()
	text := a.controls.capacity.cells[capacityKey{p, bs}].Text
	marked = strings.HasPrefix(text, "▶ ")
	n, err := strconv.Atoi(strings.TrimPrefix(text, "▶ "))
	if err != nil {
		t.Fatalf("capacity cell %s / %d reads %q", p, bs, text)
	}
	return n, marked
}

// TestCapacityViewPredictsTheSmallBudgetLesson: on the lesson's own
// settings, the capacity view's prediction at f16 and at int4 is, within
// one sequence, the concurrency the small-budget lesson measures.
func TestCapacityViewPredictsTheSmallBudgetLesson(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		a.controls.capacity.length.SetValue(lesson.SmallBudgetLength)
		a.teach.lessons.start(lesson.SmallBudget)
	})
	var f16, int4 int
	uithread.WaitFor(t, "the lesson's third step", func() bool {
		v := a.teach.lessons
		if len(v.run.lines) < 3 && !v.next.Disabled() {
			test.Tap(v.next)
		}
		if len(v.run.lines) == 3 && !v.next.Disabled() { // holding after step 3, on the lesson's f16 settings
			var marked bool
			f16, marked = cell(t, a, kvstore.F16, 16)
			int4, _ = cell(t, a, kvstore.Int4, 16)
			if !marked {
				t.Error("the capacity view does not mark the lesson's settings (f16, 16-token blocks)")
			}
			test.Tap(v.next)
			return true
		}
		return false
	})
	uithread.WaitFor(t, "the lesson's end", func() bool { // Next at each hold left
		v := a.teach.lessons
		if !v.run.ended && !v.next.Disabled() {
			test.Tap(v.next)
		}
		return v.run.ended
	})
	var done chan struct{}
	uithread.Locked(func() { done = a.teach.lessons.run.done })
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the lesson did not put everything back")
	}
	var res lesson.Result
	uithread.Locked(func() { res = a.teach.lessons.run.res })
	if !res.Held() {
		t.Errorf("the lesson's figures: %v", res.Figures)
	}
	for _, c := range []struct {
		name      string
		predicted int
	}{{"f16", f16}, {"int4", int4}} {
		got, ok := res.Measured["sequences at once, "+c.name]
		if !ok {
			t.Fatalf("the lesson measured nothing at %s: %v", c.name, res.Measured)
		}
		want := min(c.predicted, lesson.SmallBudgetLoad.Users)
		t.Logf("%s: the capacity view predicts %d sequences of %d tokens, the lesson measured %d", c.name, c.predicted, lesson.SmallBudgetLength, got)
		if got < want-1 || got > want+1 {
			t.Errorf("%s: the capacity view predicts %d (of %d users), the lesson measured %d at once", c.name, c.predicted, lesson.SmallBudgetLoad.Users, got)
		}
	}
}

// TestCapacityViewFollowsTheSliders: moving the block-size slider moves
// the mark before the change is applied, and more budget fits more.
func TestCapacityViewFollowsTheSliders(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		a.controls.capacity.length.SetValue(512)
		if _, marked := cell(t, a, kvstore.F16, 16); !marked {
			t.Error("the settings in force (f16, 16) are not marked")
		}
		a.controls.block.SetValue(float64(nearest(BlockSizes, 64))) // dragging, not yet applied
		if _, marked := cell(t, a, kvstore.F16, 64); !marked {
			t.Error("dragging the block size to 64 does not move the mark")
		}
		a.controls.budget.SetValue(float64(nearest(Budgets, 1<<20)))
		small, _ := cell(t, a, kvstore.F16, 64)
		a.controls.budget.SetValue(float64(nearest(Budgets, 4<<20)))
		big, _ := cell(t, a, kvstore.F16, 64)
		if big <= small {
			t.Errorf("1 MiB holds %d sequences of 512 tokens, 4 MiB %d", small, big)
		}
		if q4, _ := cell(t, a, kvstore.Int4, 64); q4 <= big {
			t.Errorf("at 4 MiB, int4 holds %d sequences and f16 %d", q4, big)
		}
	})
}

// TestControlsRefuseAPoolNoChatFits: contiguous blocks in 256 KiB cannot
// hold one chat's context reservation; the Controls say so instead of
// "Applied", and a short prompt still runs.
func TestControlsRefuseAPoolNoChatFits(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() { a.controls.allocator.SetSelected("contiguous") })
	uithread.WaitFor(t, "contiguous", func() bool { return !a.controls.Busy() && strings.HasPrefix(a.controls.Result(), "Applied") })
	uithread.Locked(func() { a.controls.budget.OnChangeEnded(float64(nearest(Budgets, 256<<10))) })
	uithread.WaitFor(t, "the budget", func() bool { return !a.controls.Busy() && !strings.HasPrefix(a.controls.Result(), "Applying") })
	uithread.Locked(func() {
		if r := a.controls.Result(); !strings.HasPrefix(r, "Refused") || !strings.Contains(r, "no chat could run") {
			t.Errorf("contiguous in 256 KiB: %q", r)
		}
		if b := a.Engine().Config().Cache.Budget; b == 256<<10 {
			t.Error("the engine took the budget no chat fits")
		}
		if err := a.chat.SendText(a.chat.Selected(), "Once upon a time"); err != nil {
			t.Fatal(err)
		}
	})
	uithread.WaitFor(t, "the reply", func() bool { return !a.chat.Running(a.chat.Selected()) })
	uithread.Locked(func() {
		c := a.chat.Conversations().List[0]
		if m := c.Messages[len(c.Messages)-1]; m.Error != "" || m.Tokens == 0 {
			t.Errorf("a short prompt after the refusal: %d tokens, error %q", m.Tokens, m.Error)
		}
	})
}

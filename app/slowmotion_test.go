package app

import (
	"sync"
	"testing"
	"time"

	"kvscope/app/store"
	"kvscope/app/uithread"
	"kvscope/engine"
)

// TestSlowMotionHoldsWithTwoChats sets slow motion on the Teaching tab's
// slider and runs two conversations at once: the engine's step rate must
// follow the setting within 20 % (it used to run at full speed once a
// second chat had woken the engine during a delay).
func TestSlowMotionHoldsWithTwoChats(t *testing.T) {
	const delayMS = 100
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(stories(t)); err != nil {
		t.Fatal(err)
	}
	uithread.Locked(func() {
		a.teach.delay.SetValue(delayMS)
		a.teach.delay.OnChangeEnded(delayMS)
	})
	uithread.WaitFor(t, "the delay", func() bool { return !a.teach.delayBusy })
	type obs struct {
		at   time.Time
		step int64
		dur  time.Duration
	}
	var mu sync.Mutex
	var seen []obs
	stop := a.Engine().Subscribe(func(s *engine.Snapshot) {
		mu.Lock()
		defer mu.Unlock()
		live := 0
		for _, r := range s.Requests {
			if len(r.Samples) > 0 && r.Samples[0].Generated > 0 {
				live++
			}
		}
		if live == 2 && (len(seen) == 0 || seen[len(seen)-1].step != s.Last.Step) {
			seen = append(seen, obs{time.Now(), s.Last.Step, s.Last.Duration})
		}
	})
	defer stop()
	var ids []int64
	uithread.Locked(func() {
		ids = append(ids, a.chat.Selected(), a.chat.NewConversation())
		for i, id := range ids {
			a.chat.Update(id, func(c *store.Conversation) { c.Sampling.MaxTokens = 14 })
			if err := a.chat.SendText(id, []string{"Once upon a time", "One day, a little bird"}[i]); err != nil {
				t.Fatal(err)
			}
		}
	})
	uithread.WaitFor(t, "both replies", func() bool { return !a.chat.Running(ids[0]) && !a.chat.Running(ids[1]) })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 6 {
		t.Fatalf("only %d steps seen with both chats generating", len(seen))
	}
	first, last := seen[0], seen[len(seen)-1]
	var work time.Duration
	for _, o := range seen[1:] {
		work += o.dur
	}
	want := 1 / (delayMS*time.Millisecond + work/time.Duration(len(seen)-1)).Seconds()
	got := float64(last.step-first.step) / last.at.Sub(first.at).Seconds()
	t.Logf("two chats at %d ms a step: %.2f steps/s, the setting gives %.2f", delayMS, got, want)
	if got > want*1.2 || got < want*0.8 {
		t.Errorf("two chats at %d ms a step ran %.2f steps/s; the setting gives %.2f", delayMS, got, want)
	}
}

package app

import (
	"strings"
	"testing"

	"kvscope/app/lesson"
	"kvscope/app/uithread"
)

func TestLessonShotNames(t *testing.T) {
	for name, want := range map[string]string{
		"Parallel sampling n = 4": "lesson-parallel-sampling-n-4.png",
		"f16 vs int4":             "lesson-f16-vs-int4.png",
		"What the cache buys":     "lesson-what-the-cache-buys.png",
		"  Paged vs contiguous!":  "lesson-paged-vs-contiguous.png",
	} {
		if got := LessonShotName(name); got != want {
			t.Errorf("LessonShotName(%q) = %q, want %q", name, got, want)
		}
	}
	seen := map[string]bool{}
	for _, l := range lesson.All {
		n := LessonShotName(l.Name)
		if seen[n] {
			t.Errorf("two lessons share the picture %s", n)
		}
		seen[n] = true
		if k := lessonShotStep(l); k < 1 || k > len(l.Steps) || l.Picture != 0 && k != l.Picture {
			t.Errorf("lesson %q (%d steps, picture %d) is pictured at step %d", l.Name, len(l.Steps), l.Picture, k)
		}
	}
	for steps, want := range map[int]int{2: 1, 3: 2, 4: 2, 5: 3} {
		if got := lessonShotStep(&lesson.Lesson{Steps: make([]lesson.Step, steps)}); got != want {
			t.Errorf("lessonShotStep of %d steps = %d, want %d", steps, got, want)
		}
	}
}

// The screenshot session's conversations on the demo model render through
// a chat template, named in the conversation's mode bar.
func TestScreenshotConversationsAreTemplated(t *testing.T) {
	a, _ := newApp(t, t.TempDir())
	if err := a.OpenModel(DemoModel); err != nil {
		t.Fatal(err)
	}
	first, err := a.shotConversations()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.shotGenerated(5); err != nil {
		t.Fatal(err)
	}
	onUI(func() { a.chat.Select(first) })
	uithread.Locked(func() {
		if got := chatTemplate(a); got != "Template: from the file" {
			t.Errorf("the first conversation's mode bar says %q, want the demo file's template", got)
		}
		for _, c := range a.chat.Conversations().List {
			if c.ID == first && !strings.Contains(c.System, "storyteller") {
				t.Errorf("the first conversation's system prompt is %q", c.System)
			}
		}
	})
}

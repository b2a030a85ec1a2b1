package lesson

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"kvscope/engine"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// stories loads the shared stories260K model.
func stories(t testing.TB) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	m, err := model.Load(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok
}

// userConfig is settings a user might have chosen, unlike any lesson's:
// the lessons must not run on them, and must put them back.
func userConfig() engine.Config {
	c := engine.DefaultConfig()
	c.Cache.BlockSize = 32
	c.Cache.K, c.Cache.V = kvstore.Int8, kvstore.Q8_0
	c.Sched.MaxSeqs = 3
	return c
}

// play runs l through a runner on e and checks every step's figure as
// the runner reports it, and that the user's settings come back.
func play(t *testing.T, e *engine.Engine, l *Lesson, after string) {
	t.Helper()
	r := NewRunner(e)
	r.SetPace(time.Millisecond)
	var figs []Figure
	steps := 0
	r.OnProgress = func(p Progress) {
		switch {
		case p.Done:
		case p.Figure != nil:
			figs = append(figs, *p.Figure)
		default:
			steps++
		}
	}
	before := e.Config()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := r.Run(ctx, l)
	if err != nil {
		t.Fatalf("%s%s: %v", l.Name, after, err)
	}
	if steps != len(l.Steps) || len(figs) != len(l.Steps) || len(res.Figures) != len(l.Steps) {
		t.Errorf("%s%s: %d steps started, %d figures reported, %d in the result, for %d steps", l.Name, after, steps, len(figs), len(res.Figures), len(l.Steps))
	}
	for i, f := range figs {
		if !f.Held {
			t.Errorf("%s%s, step %d: %s", l.Name, after, i+1, f)
		} else {
			t.Logf("%s%s, step %d: %s", l.Name, after, i+1, f)
		}
	}
	t.Logf("%s%s took %v", l.Name, after, time.Since(start).Round(time.Millisecond))
	if got := e.Config(); !reflect.DeepEqual(got, before) {
		t.Errorf("%s%s left the settings at %+v, not the user's %+v", l.Name, after, got, before)
	}
	if s := e.Snapshot(); len(s.Requests) != 0 || s.Paused {
		t.Errorf("%s%s left %d requests, paused %v", l.Name, after, len(s.Requests), s.Paused)
	}
}

// TestLessons plays every lesson on the demo model, alone and after each
// of the other lessons, checking each step's promised figure against the
// engine's snapshot (see each lesson's Check): ref count ≥ 3 on the
// shared system prompt's blocks; one prompt computation and a positive
// copy-on-write count for n = 4; a preemption and every request finishing
// under the small budget; at least 1.5× as many sequences at once paged as
// contiguous; more tokens at int4 than at f16. "After each other" is one
// engine playing a round that holds every ordered pair of lessons once
// (pairRound), 31 plays for 6 lessons where pairs played apart took 60.
func TestLessons(t *testing.T) {
	m, tok := stories(t)
	for _, l := range All {
		t.Run(l.Name, func(t *testing.T) {
			e, err := engine.New(m, tok, userConfig())
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			play(t, e, l, "")
		})
	}
	if testing.Short() {
		return
	}
	t.Run("each after each other", func(t *testing.T) {
		e, err := engine.New(m, tok, userConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		round := pairRound(len(All))
		play(t, e, All[round[0]], "")
		for k := 1; k < len(round); k++ {
			play(t, e, All[round[k]], " after "+All[round[k-1]].Name)
		}
	})
}

// pairRound returns an order of 0..n-1 in which every ordered pair (i, j),
// i ≠ j, stands side by side exactly once: an Eulerian circuit of the
// complete directed graph (Hierholzer's algorithm), n(n-1)+1 long.
func pairRound(n int) []int {
	next := make([]int, n) // the next successor each vertex has not used
	var circuit, stack []int
	stack = append(stack, 0)
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		if next[v] == v {
			next[v]++
		}
		if next[v] < n {
			w := next[v]
			next[v]++
			stack = append(stack, w)
			continue
		}
		circuit = append(circuit, v)
		stack = stack[:len(stack)-1]
	}
	slices.Reverse(circuit)
	return circuit
}

// TestPairRound: every ordered pair once, and nothing else.
func TestPairRound(t *testing.T) {
	for n := 1; n <= 7; n++ {
		r := pairRound(n)
		if len(r) != n*(n-1)+1 {
			t.Fatalf("n %d: round of %d, want %d: %v", n, len(r), n*(n-1)+1, r)
		}
		seen := map[[2]int]bool{}
		for k := 1; k < len(r); k++ {
			p := [2]int{r[k-1], r[k]}
			if p[0] == p[1] || seen[p] {
				t.Fatalf("n %d: pair %v twice or a lesson after itself: %v", n, p, r)
			}
			seen[p] = true
		}
	}
}

// TestRunnerWaitsForNext plays a lesson step by step: after each step (the
// last one too) the scheduler stays paused, the heatmap still, on the
// snapshot the step's figure was checked on, until Next.
func TestRunnerWaitsForNext(t *testing.T) {
	m, tok := stories(t)
	e, err := engine.New(m, tok, userConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := NewRunner(e) // pace 0: Next goes on
	waiting := make(chan Progress, 8)
	r.OnProgress = func(p Progress) {
		if p.Waiting {
			waiting <- p
		}
	}
	done := make(chan error, 1)
	go func() { _, err := r.Run(context.Background(), SharedPrompt); done <- err }()
	for i := range len(SharedPrompt.Steps) {
		select {
		case p := <-waiting:
			if p.Index != i || p.Figure == nil || !p.Figure.Held || p.Snapshot == nil || p.Last != (i == len(SharedPrompt.Steps)-1) {
				t.Fatalf("step %d: %+v", i+1, p)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			s, err := e.WaitFor(ctx, func(s *engine.Snapshot) bool { return s.Paused })
			cancel()
			if err != nil {
				t.Fatalf("after step %d the scheduler is not paused: %v", i+1, err)
			}
			step := s.Step
			time.Sleep(100 * time.Millisecond)
			if now := e.Snapshot(); now.Step != step || step != p.Snapshot.Step || len(now.Requests) == 0 && i == 0 {
				t.Errorf("after step %d, waiting for Next, the engine went from step %d (checked at %d) to %d (%d requests)", i+1, step, p.Snapshot.Step, now.Step, len(now.Requests))
			}
			r.Next()
		case err := <-done:
			t.Fatalf("the lesson ended before step %d's Next: %v", i+1, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunnerStopRestores stops a lesson in its middle: its requests end
// and the user's settings come back.
func TestRunnerStopRestores(t *testing.T) {
	m, tok := stories(t)
	e, err := engine.New(m, tok, userConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r := NewRunner(e)
	ctx, cancel := context.WithCancel(context.Background())
	r.OnProgress = func(p Progress) {
		if p.Figure != nil && p.Index == 0 {
			cancel() // stopped while it holds after the first step
		}
	}
	_, err = r.Run(ctx, SmallBudget)
	if err != context.Canceled {
		t.Errorf("a stopped lesson returned %v", err)
	}
	if got := e.Config(); !reflect.DeepEqual(got, userConfig()) {
		t.Errorf("after the stop the settings are %+v", got)
	}
	s := e.Snapshot()
	if len(s.Requests) != 0 || s.Paused {
		t.Errorf("after the stop: %d requests, paused %v", len(s.Requests), s.Paused)
	}
}

// copies says a step's copy-on-write pairs in words.
func TestCopies(t *testing.T) {
	for _, c := range []struct {
		pairs []int
		want  string
	}{
		{[]int{2, 3}, "block 2 into 3"},
		{[]int{2, 3, 2, 4, 2, 5}, "block 2 into 3, 4 and 5"},
		{[]int{2, 3, 7, 8}, "block 2 into 3; block 7 into 8"},
		{nil, ""},
	} {
		if got := copies(c.pairs); got != c.want {
			t.Errorf("copies(%v) = %q, want %q", c.pairs, got, c.want)
		}
	}
}

package engine

import (
	"context"
	"fmt"
	"testing"

	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/sample"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// stories loads the shared stories260K model and its tokenizer.
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

func newEngine(t testing.TB, m *model.Model, tok *tokenizer.Tokenizer, cfg Config) *Engine {
	t.Helper()
	e, err := New(m, tok, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

var greedy = &sample.Params{Temperature: 0, TopP: 1, RepeatPenalty: 1}

// prompts are eight requests of different lengths.
var prompts = []struct {
	text string
	max  int
}{
	{"Once upon a time", 60},
	{"Tom and his dog went to the park", 40},
	{"The little bird was sad because", 70},
	{"Lily had a red ball. She", 25},
	{"One day, a big bear", 50},
	{"Sam liked to eat apples and", 33},
	{"The sun was hot. The cat", 45},
	{"Mom said, \"Let's go", 55},
}

func request(i int) Request {
	return Request{Prompt: prompts[i].text, MaxTokens: prompts[i].max, Sampling: greedy, Label: fmt.Sprint("p", i)}
}

// runAll submits every request at once and returns their texts.
func runAll(t testing.TB, e *Engine, reqs []Request) []string {
	t.Helper()
	streams := make([]*Stream, len(reqs))
	for i, r := range reqs {
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	out := make([]string, len(reqs))
	for i, s := range streams {
		texts, finals := s.Collect()
		if finals[0].Reason == FinishError {
			t.Fatalf("request %d: %v", i, finals[0].Err)
		}
		out[i] = texts[0]
	}
	return out
}

// alone runs each request by itself on a fresh engine.
func alone(t testing.TB, m *model.Model, tok *tokenizer.Tokenizer) []string {
	out := make([]string, len(prompts))
	for i := range prompts {
		e := newEngine(t, m, tok, DefaultConfig())
		out[i] = runAll(t, e, []Request{request(i)})[0]
		e.Close()
	}
	return out
}

func allRequests() []Request {
	var r []Request
	for i := range prompts {
		r = append(r, request(i))
	}
	return r
}

func TestConcurrentEqualsAlone(t *testing.T) {
	m, tok := stories(t)
	want := alone(t, m, tok)
	e := newEngine(t, m, tok, DefaultConfig())
	got := runAll(t, e, allRequests())
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d batched:\n%q\nalone:\n%q", i, got[i], want[i])
		}
	}
	if want[0] == "" {
		t.Fatal("empty output")
	}
	checkNoLeak(t, e)
}

// checkNoLeak waits for the engine to go idle and checks that no block is
// owned and the cache's invariants hold.
func checkNoLeak(t testing.TB, e *Engine) {
	t.Helper()
	err := e.call(func() error {
		if !e.sch.Idle() {
			return fmt.Errorf("scheduler not idle")
		}
		if err := e.mgr.Check(); err != nil {
			return err
		}
		if m := e.mgr.Metrics(); m.UsedBlocks != 0 {
			return fmt.Errorf("%d blocks still used", m.UsedBlocks)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPreemptionKeepsOutputs(t *testing.T) {
	m, tok := stories(t)
	want := alone(t, m, tok)
	for _, mode := range []kvcache.PreemptMode{kvcache.Recompute, kvcache.Swap} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Cache.BlockSize = 8
			cfg.Cache.Preempt = mode
			sc := m.CacheConfig(8, 1, kvstore.F16, kvstore.F16)
			cfg.Cache.Budget = int64(24 * kvstore.BlockBytes(sc)) // 192 token slots for 8 requests of ~70-90 tokens
			e := newEngine(t, m, tok, cfg)
			got := runAll(t, e, allRequests())
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("request %d under preemption:\n%q\nalone:\n%q", i, got[i], want[i])
				}
			}
			checkNoLeak(t, e)
			met := metrics(e)
			t.Logf("%s: %d preemptions (%d swap, %d fell back), %d evictions", mode, met.Preemptions, met.SwapPreemptions, met.SwapFallbacks, met.Evictions)
			if met.Preemptions == 0 {
				t.Error("the budget forced no preemption")
			}
			if mode == kvcache.Swap && met.SwapPreemptions == 0 {
				t.Error("no preemption swapped")
			}
		})
	}
}

func TestPrefixCacheReuse(t *testing.T) {
	m, tok := stories(t)
	ids := testshared.IDs(t, testshared.Path(t, "reference/stories260K-textA.ids"))
	prefix := ids[:100]
	second := append(append([]int(nil), prefix...), tok.Encode(" The end", false, false)...)

	cold := newEngine(t, m, tok, DefaultConfig())
	wantText := runAll(t, cold, []Request{{Tokens: second, MaxTokens: 20, Sampling: greedy}})[0]

	e := newEngine(t, m, tok, DefaultConfig())
	runAll(t, e, []Request{{Tokens: prefix, MaxTokens: 5, Sampling: greedy}})
	before := metrics(e)
	s, err := e.Submit(context.Background(), Request{Tokens: second, MaxTokens: 20, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	texts, finals := s.Collect()
	if texts[0] != wantText {
		t.Errorf("with the prefix cached:\n%q\ncold:\n%q", texts[0], wantText)
	}
	// 100 prefix tokens in blocks of 16: 6 full blocks (96 tokens) are reused.
	if finals[0].CachedTokens != 96 {
		t.Errorf("%d prompt tokens reused, want 96", finals[0].CachedTokens)
	}
	// Only the new prompt tokens are computed, then one row per further token.
	if want := len(second) - 96 + 19; finals[0].Computed != want {
		t.Errorf("computed %d rows, want %d (the %d uncached prompt tokens and 19 decodes)", finals[0].Computed, want, len(second)-96)
	}
	after := metrics(e)
	if hits := after.PrefixHitTokens - before.PrefixHitTokens; hits != 96 {
		t.Errorf("hit counter rose by %d tokens, want 96", hits)
	}
	if q := after.PrefixQueryTokens - before.PrefixQueryTokens; q != int64(len(second)) {
		t.Errorf("query counter rose by %d tokens, want %d", q, len(second))
	}
}

// metrics reads the cache's metrics on the engine goroutine (a snapshot may
// lag behind by one publication).
func metrics(e *Engine) kvcache.Metrics {
	var m kvcache.Metrics
	e.call(func() error { m = e.mgr.Metrics(); return nil })
	return m
}

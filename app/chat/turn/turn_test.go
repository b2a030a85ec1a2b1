package turn

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"kvscope/app/store"
	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/internal/testshared"
)

// stories starts an engine on the shared stories260K model.
func stories(t *testing.T) (*engine.Engine, *tokenizer.Tokenizer) {
	t.Helper()
	m, err := model.Load(testshared.Path(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, tok, engine.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); m.Close() })
	return e, tok
}

// recorder keeps a Turn's reports; done is closed on the Done one.
type recorder struct {
	once     sync.Once
	done     chan struct{}
	mu       sync.Mutex
	req      uint64
	reports  []Progress
	reqFirst bool // Submitted came before any report
}

func (r *recorder) hooks() Hooks {
	r.done = make(chan struct{})
	return Hooks{
		Submitted: func(req uint64) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.req, r.reqFirst = req, len(r.reports) == 0
		},
		Progress: func(p Progress) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reports = append(r.reports, p)
			if p.Done {
				r.once.Do(func() { close(r.done) })
			}
		},
	}
}

func (r *recorder) last() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reports) == 0 {
		return Progress{}
	}
	return r.reports[len(r.reports)-1]
}

// wait waits for the turn to end and checks it reported Done exactly once,
// last: a while after the Done report, no other came.
func (r *recorder) wait(t *testing.T) Progress {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the turn did not end in 60 s")
	}
	time.Sleep(2 * Every)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.reports {
		if p.Done != (i == len(r.reports)-1) {
			t.Fatalf("report %d of %d has Done %v: want exactly one Done report, the last", i+1, len(r.reports), p.Done)
		}
	}
	if len(r.reports) == 0 {
		t.Fatal("no report")
	}
	return r.reports[len(r.reports)-1]
}

func ids(tok *tokenizer.Tokenizer, text string) func() ([]int, error) {
	return func() ([]int, error) { return tok.Encode(text, true, false), nil }
}

func greedy() *store.Sampling {
	s := store.DefaultSampling()
	s.Temperature, s.Seed = 0, 1
	return &s
}

func request(maxTokens int) engine.Request {
	sp := Sampling(*greedy())
	return engine.Request{Sampling: &sp, MaxTokens: maxTokens, Label: "turn test"}
}

func TestTurnStreamsToTheLengthLimit(t *testing.T) {
	e, tok := stories(t)
	var r recorder
	Start(e, ids(tok, "Once upon a time"), request(30), r.hooks())
	p := r.wait(t)
	if !r.reqFirst || r.req == 0 {
		t.Errorf("Submitted gave request %d, before the first report: %v", r.req, r.reqFirst)
	}
	if p.Finish != string(engine.FinishLength) || p.Err != "" || p.Refused {
		t.Errorf("final %+v: want length, no error", p)
	}
	if p.Generated != 30 || len(p.IDs) != 30 || strings.TrimSpace(p.Text) == "" {
		t.Errorf("final: %d generated, %d ids, text %q: want 30, 30 and text", p.Generated, len(p.IDs), p.Text)
	}
	if p.Prompt != len(tok.Encode("Once upon a time", true, false)) || p.Cached > p.Prompt {
		t.Errorf("prompt %d tokens, %d cached", p.Prompt, p.Cached)
	}
	if got := tok.Decode(p.IDs); strings.TrimSpace(p.Text) != strings.TrimSpace(got) {
		t.Errorf("text %q is not the ids' text %q", p.Text, got)
	}
	var m store.Message
	p.Apply(&m, "v")
	if m.Text != p.Text || m.Tokens != 30 || len(m.IDs) != 30 || m.Vocab != "v" || m.Finish != "length" || m.Prompt != p.Prompt || m.TPS <= 0 {
		t.Errorf("applied message %+v", m)
	}
}

func TestTurnStopKeepsTheTextSoFar(t *testing.T) {
	e, tok := stories(t)
	var r recorder
	tn := Start(e, ids(tok, "Tom had a red ball"), request(0), r.hooks())
	deadline := time.Now().Add(30 * time.Second)
	for len(r.last().IDs) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no 3 tokens in 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := r.last()
	tn.Stop()
	p := r.wait(t)
	if p.Finish != string(engine.FinishCancelled) || p.Err != "" {
		t.Errorf("final %+v: want cancelled without an error", p)
	}
	if !strings.HasPrefix(p.Text, before.Text) || len(p.IDs) < len(before.IDs) {
		t.Errorf("stopping lost text: %q then %q", before.Text, p.Text)
	}
}

func TestTurnStoppedBeforeSubmitting(t *testing.T) {
	e, tok := stories(t)
	var r recorder
	release := make(chan struct{})
	tn := Start(e, func() ([]int, error) {
		<-release
		return tok.Encode("Once", true, false), nil
	}, request(5), r.hooks())
	tn.Stop()
	close(release)
	p := r.wait(t)
	if p.Finish != string(engine.FinishCancelled) || p.Err != "" || len(p.IDs) != 0 {
		t.Errorf("final %+v: want cancelled, no error, no tokens", p)
	}
}

func TestTurnRefused(t *testing.T) {
	e, tok := stories(t)
	tests := []struct {
		name   string
		prompt func() ([]int, error)
		req    engine.Request
		want   string
	}{
		{"the prompt cannot be made", func() ([]int, error) { return nil, errors.New("the template failed") }, request(5), "the template failed"},
		{"the engine refuses the request", ids(tok, "Once"), request(-1), "max tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			Start(e, tc.prompt, tc.req, r.hooks())
			p := r.wait(t)
			if r.req != 0 {
				t.Errorf("Submitted was called (request %d)", r.req)
			}
			if !p.Refused || p.Finish != FinishError || !strings.Contains(p.Err, tc.want) {
				t.Errorf("final %+v: want refused, error %q", p, tc.want)
			}
			m := store.Message{Role: "assistant"}
			p.Apply(&m, "v")
			if m.Finish != "error" || m.Error != p.Err {
				t.Errorf("applied message %+v", m)
			}
		})
	}
}

// The next turn's prompt holds the reply's ids as generated, so the prefix
// cache serves the whole of the turn before it but the last partial block.
func TestTurnIDsReuseThePrefixCache(t *testing.T) {
	e, tok := stories(t)
	prompt := tok.Encode("Once upon a time, there was a little girl named Lily. She loved to play outside in the park.", true, false)
	var r1 recorder
	Start(e, func() ([]int, error) { return prompt, nil }, request(24), r1.hooks())
	first := r1.wait(t)
	if first.Finish != "length" || len(first.IDs) != 24 {
		t.Fatalf("first turn %+v", first)
	}
	next := append(append(append([]int(nil), prompt...), first.IDs...), tok.Encode(" The end.", false, false)...)
	var r2 recorder
	Start(e, func() ([]int, error) { return next, nil }, request(4), r2.hooks())
	second := r2.wait(t)
	block := e.Config().Cache.BlockSize
	if want := (len(prompt) + len(first.IDs) - 1) / block * block; second.Cached < want-block || second.Cached < block {
		t.Errorf("the next turn reused %d of %d prompt tokens, want about %d (the first turn's full blocks)", second.Cached, second.Prompt, want)
	}
}

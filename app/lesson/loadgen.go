// This file holds the load generator: synthetic users that send requests
// of a given prompt and reply length.

package lesson

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"kvscope/engine"
	"kvscope/engine/sample"
	"kvscope/engine/tokenizer"
)

// Load describes synthetic users.
type Load struct {
	Users  int // how many users at once
	Prompt int // prompt tokens each request sends
	Reply  int // tokens each user reads of its reply
	// Once: each user sends one request and is done (lessons); else each
	// sends one after another until stopped.
	Once bool
	// OpenEnded requests ask for replies up to the whole context (as a
	// chat does, not knowing how long the reply will be), and each user
	// stops reading, cancelling the request, after Reply tokens. Else a
	// request asks for exactly Reply tokens.
	OpenEnded bool
	// Seed makes the prompts and samples; 0 picks one.
	Seed uint64
}

// String says the load in words.
func (l Load) String() string {
	return fmt.Sprintf("%s, prompts of %s, replies of %s", engine.Count(l.Users, "user"), engine.Count(l.Prompt, "token"), engine.Count(l.Reply, "token"))
}

// LoadGen runs synthetic users: each sends requests of random ordinary
// tokens through the engine, like any chat, and reads the reply.
type LoadGen struct {
	load    Load
	cancel  context.CancelFunc
	done    chan struct{}
	arrived chan struct{} // closed once every user has sent (or been refused) its first request
	started time.Time

	mu       sync.Mutex
	finished int // requests read to their end (or, open-ended, to Reply tokens)
	tokens   int
	failed   int // requests that ended in an error
	refused  int // requests Submit refused
	lastErr  string
	finals   []engine.Chunk
}

// NormalTokens lists a tokenizer's ordinary text tokens, for synthetic
// prompts.
func NormalTokens(tok *tokenizer.Tokenizer) []int {
	var ids []int
	for id := 0; id < tok.Size(); id++ {
		if tok.Type(id) == tokenizer.TypeNormal && strings.TrimSpace(tok.Token(id)) != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// StartLoad starts l's users on e. They stop when ctx ends, Stop is called
// or (Once) their requests have ended.
func StartLoad(ctx context.Context, e *engine.Engine, l Load) (*LoadGen, error) {
	if l.Users < 1 || l.Prompt < 1 || l.Reply < 1 {
		return nil, fmt.Errorf("a load needs at least one user, a prompt and a reply (%s)", l)
	}
	ids := NormalTokens(e.Tokenizer())
	if len(ids) == 0 {
		return nil, errors.New("the model's vocabulary has no ordinary tokens to make prompts from")
	}
	seed := l.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ctx, cancel := context.WithCancel(ctx)
	g := &LoadGen{load: l, cancel: cancel, done: make(chan struct{}), arrived: make(chan struct{}), started: time.Now()}
	var wg, first sync.WaitGroup
	first.Add(l.Users)
	for u := range l.Users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(u)+1, seed))
			sent := sync.OnceFunc(first.Done)
			defer sent() // a user stopped before its first request
			for ctx.Err() == nil {
				g.request(ctx, e, ids, rng, u, sent)
				if l.Once {
					return
				}
			}
		}()
	}
	go func() {
		first.Wait()
		close(g.arrived)
	}()
	go func() {
		wg.Wait()
		cancel()
		close(g.done)
	}()
	return g, nil
}

// request sends one user's request and reads it; sent is called once
// the engine has it (or has refused it).
func (g *LoadGen) request(ctx context.Context, e *engine.Engine, ids []int, rng *rand.Rand, u int, sent func()) {
	l := g.load
	prompt := make([]int, l.Prompt)
	for i := range prompt {
		prompt[i] = ids[rng.IntN(len(ids))]
	}
	sp := sample.DefaultParams()
	sp.Seed = rng.Uint64()
	max := l.Reply
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	if l.OpenEnded {
		max = 0
	}
	st, err := e.Submit(rctx, engine.Request{Tokens: prompt, MaxTokens: max, IgnoreEOS: true, Sampling: &sp, Label: fmt.Sprintf("user %d", u+1)})
	sent()
	if err != nil {
		g.mu.Lock()
		g.refused++
		g.lastErr = err.Error()
		g.mu.Unlock()
		if !l.Once {
			select { // a refusal is not retried at once
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		return
	}
	n := 0
	var final engine.Chunk
	for c := range st.C {
		if c.Done {
			final = c
			continue
		}
		n++
		if l.OpenEnded && n == l.Reply {
			stop() // the user has read enough
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokens += n
	switch {
	case final.Reason == engine.FinishError:
		g.failed++
		if final.Err != nil {
			g.lastErr = final.Err.Error()
		}
	case n >= l.Reply || final.Reason != engine.FinishCancelled:
		g.finished++
	}
	final.Generated = n
	g.finals = append(g.finals, final)
}

// Load returns what the generator runs.
func (g *LoadGen) Load() Load { return g.load }

// Stop ends the users (their requests are cancelled); Done tells when they
// have.
func (g *LoadGen) Stop() { g.cancel() }

// Done is closed when every user has stopped.
func (g *LoadGen) Done() <-chan struct{} { return g.done }

// Arrived is closed once every user has sent its first request (or had
// it refused): from then on the engine holds them all.
func (g *LoadGen) Arrived() <-chan struct{} { return g.arrived }

// Stats is how a load went.
type Stats struct {
	Finished, Tokens, Failed, Refused int
	LastErr                           string
	Elapsed                           time.Duration
	Finals                            []engine.Chunk // each request's final chunk, Generated the tokens read
}

// Stats says how the load is going.
func (g *LoadGen) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Finished: g.finished, Tokens: g.tokens, Failed: g.failed, Refused: g.refused, LastErr: g.lastErr,
		Elapsed: time.Since(g.started), Finals: append([]engine.Chunk(nil), g.finals...)}
}

// Status says in one line how the load is going, with what s shows runs.
func (g *LoadGen) Status(s *engine.Snapshot) string {
	st := g.Stats()
	line := fmt.Sprintf("%s: %s done, %s generated in %s; now %d running, %d waiting, %d swapped.",
		g.load, engine.Count(st.Finished, "request"), engine.Count(st.Tokens, "token"),
		st.Elapsed.Round(time.Second), s.Running, s.Waiting, s.Swapped)
	if n := st.Failed + st.Refused; n > 0 {
		line += fmt.Sprintf(" %s failed or refused; last: %s", engine.Count(n, "request"), st.LastErr)
	}
	return line
}

package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"kvscope/engine/constrain"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
)

// constrainedCase is one constrained request of the tests below.
type constrainedCase struct {
	name    string
	prompt  string
	schema  string // a JSON Schema, or
	choice  []string
	regex   string
	object  bool // any JSON object
	seed    uint64
	greedy  bool
	maxToks int
}

var constrainedCases = []constrainedCase{
	{name: "schema greedy", prompt: "Once upon a time", greedy: true, maxToks: 80,
		schema: `{"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer"},"mood":{"enum":["happy","sad"]}},"required":["name","age","mood"]}`},
	{name: "schema sampled", prompt: "Tom and his dog went to the park", seed: 7, maxToks: 80,
		schema: `{"type":"object","properties":{"pets":{"type":"array","items":{"type":"string","maxLength":6},"minItems":1,"maxItems":3},"ok":{"type":"boolean"}},"required":["pets","ok"]}`},
	{name: "choice", prompt: "The little bird was sad because", seed: 3, maxToks: 20, choice: []string{"yes", "no", "the bird flew away"}},
	{name: "regex", prompt: "Lily had a red ball. She", greedy: true, maxToks: 40, regex: `[A-Z][a-z]{2,8}( [a-z]{1,8}){2,4}\.`},
	{name: "object", prompt: "One day, a big bear", seed: 11, maxToks: 60, object: true},
	{name: "schema formats", prompt: "Sam liked to eat apples and", seed: 5, maxToks: 90,
		schema: `{"type":"object","properties":{"day":{"type":"string","format":"date"},"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{3}$"}},"required":["day","code"]}`},
}

func (c constrainedCase) grammar(t testing.TB) *constrain.Grammar {
	t.Helper()
	var g *constrain.Grammar
	var err error
	switch {
	case c.schema != "":
		g, err = constrain.Schema([]byte(c.schema))
	case c.choice != nil:
		g, err = constrain.Choice(c.choice)
	case c.regex != "":
		g, err = constrain.Regex(c.regex)
	default:
		g = constrain.JSON(c.object)
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (c constrainedCase) request(t testing.TB) Request {
	p := sample.DefaultParams()
	p.Seed = c.seed
	if c.greedy {
		p.Temperature = 0
	}
	return Request{Prompt: c.prompt, MaxTokens: c.maxToks, Sampling: &p, Constraint: c.grammar(t), Label: c.name}
}

// runConstrained submits every case at once and returns texts and finals.
func runConstrained(t *testing.T, e *Engine, cases []constrainedCase) ([]string, []Chunk) {
	t.Helper()
	streams := make([]*Stream, len(cases))
	for i, c := range cases {
		s, err := e.Submit(context.Background(), c.request(t))
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	texts := make([]string, len(cases))
	finals := make([]Chunk, len(cases))
	for i, s := range streams {
		tx, fs := s.Collect()
		texts[i], finals[i] = tx[0], fs[0]
	}
	return texts, finals
}

// TestConstrainedOutput checks each constrained request's output against
// its constraint (and a schema's output against the jsonschema library),
// then that batching under a budget that forces preemption, and a second
// run served from the prefix cache, give the same outputs.
func TestConstrainedOutput(t *testing.T) {
	m, tok := stories(t)
	want := make([]string, len(constrainedCases))
	for i, c := range constrainedCases {
		e := newEngine(t, m, tok, DefaultConfig())
		texts, finals := runConstrained(t, e, constrainedCases[i:i+1])
		e.Close()
		text, fin := texts[0], finals[0]
		want[i] = text
		g := c.grammar(t)
		switch fin.Reason {
		case FinishStop:
			if !g.Match(text) {
				t.Errorf("%s: finished with %q, which the constraint does not accept", c.name, text)
			}
			if fin.Complete == (fin.End != nil) {
				t.Errorf("%s: ended with Complete %v and End %v: want the grammar's end or an end token, one of them", c.name, fin.Complete, fin.End)
			}
		case FinishLength:
			if fin.Complete {
				t.Errorf("%s: cut at max tokens, yet Complete", c.name)
			}
			if !g.NewMatcher().Advance(text) {
				t.Errorf("%s: cut at max tokens with %q, not a prefix of valid output", c.name, text)
			}
			if c.schema != "" {
				t.Errorf("%s: the schema's bounded output did not finish in %d tokens: %q", c.name, c.maxToks, text)
			}
		default:
			t.Fatalf("%s: finished %s: %v", c.name, fin.Reason, fin.Err)
		}
		if c.schema != "" && fin.Reason == FinishStop {
			validate(t, c.schema, text)
		}
		t.Logf("%s (%s, %d tokens): %s", c.name, fin.Reason, fin.Generated, text)
	}

	cfg := DefaultConfig()
	cfg.Cache.BlockSize = 8
	cfg.Cache.Preempt = kvcache.Recompute
	sc := m.CacheConfig(8, 1, kvstore.F16, kvstore.F16)
	cfg.Cache.Budget = int64(16 * kvstore.BlockBytes(sc)) // 128 token slots for 6 requests of up to ~100 tokens
	e := newEngine(t, m, tok, cfg)
	for round, what := range []string{"batched under preemption", "again, prompts from the prefix cache"} {
		got, finals := runConstrained(t, e, constrainedCases)
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s, %s:\n%q\nalone:\n%q", constrainedCases[i].name, what, got[i], want[i])
			}
		}
		if round == 1 {
			cached := 0
			for _, f := range finals {
				cached += f.CachedTokens
			}
			if cached == 0 {
				t.Error("the second run reused no prompt tokens from the prefix cache")
			}
		}
	}
	checkNoLeak(t, e)
	if met := metrics(e); met.Preemptions == 0 {
		t.Error("the budget forced no preemption")
	} else {
		t.Logf("%d preemptions", met.Preemptions)
	}
}

// validate checks text against schema with the jsonschema library.
func validate(t *testing.T, schema, text string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("output %q is not JSON: %v", text, err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("output %q does not validate: %v", text, err)
	}
}

package cli

import (
	"fmt"

	"kvscope/engine/kvstore"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
)

// session is a loaded model with its tokenizer and one sequence's K/V cache:
// the single-sequence path used by run and perplexity.
type session struct {
	m      *model.Model
	tok    *tokenizer.Tokenizer
	kv     *kvstore.Store
	blocks []int // the sequence's block table: every block, in order
	ctx    int   // tokens the cache holds
}

// cacheFlags are the K/V cache settings shared by commands.
type cacheFlags struct {
	blockSize int
	k, v      string
	ctx       int
}

func openSession(path string, cf cacheFlags) (*session, error) {
	m, err := model.Load(path)
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &session{m: m, tok: tok}
	if err := s.resetCache(cf); err != nil {
		m.Close()
		return nil, err
	}
	return s, nil
}

// resetCache allocates a fresh cache of cf.ctx tokens (the model's context
// length when 0).
func (s *session) resetCache(cf cacheFlags) error {
	kp, err := kvstore.ParsePrecision(cf.k)
	if err != nil {
		return fmt.Errorf("--cache-k: %w", err)
	}
	vp, err := kvstore.ParsePrecision(cf.v)
	if err != nil {
		return fmt.Errorf("--cache-v: %w", err)
	}
	s.ctx = cf.ctx
	if s.ctx <= 0 {
		s.ctx = s.m.Context
	}
	if cf.blockSize < 1 || cf.blockSize > 256 {
		return fmt.Errorf("--block-size %d: the block size must be 1 to 256 tokens", cf.blockSize)
	}
	n := (s.ctx + cf.blockSize - 1) / cf.blockSize
	c := s.m.CacheConfig(cf.blockSize, n, kp, vp)
	if err := c.Validate(); err != nil {
		return err
	}
	s.kv, err = kvstore.New(c)
	if err != nil {
		return err
	}
	s.blocks = s.blocks[:0]
	for i := range n {
		s.blocks = append(s.blocks, i)
	}
	return nil
}

func (s *session) close() { s.m.Close() }

// maxRows bounds the rows of one forward call, which bounds its scratch
// memory on long prompts.
const maxRows = 256

// forward runs tokens at positions start.. and returns the logits of the
// rows for which want(i) is true (i indexes tokens).
func (s *session) forward(tokens []int, start int, want func(i int) bool) ([][]float32, error) {
	if start+len(tokens) > s.ctx {
		return nil, fmt.Errorf("%d tokens at position %d do not fit the %d-token context", len(tokens), start, s.ctx)
	}
	var out [][]float32
	var b model.Batch
	for lo := 0; lo < len(tokens); lo += maxRows {
		b.Reset()
		for i := lo; i < min(lo+maxRows, len(tokens)); i++ {
			b.Add(tokens[i], start+i, s.blocks, want(i))
		}
		logits, err := s.m.Forward(s.kv, &b)
		if err != nil {
			return nil, err
		}
		out = append(out, logits...)
	}
	return out, nil
}

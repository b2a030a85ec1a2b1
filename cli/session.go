package cli

import (
	"fmt"

	"kvscope/engine"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
)

// loaded is a model with its tokenizer.
type loaded struct {
	m   *model.Model
	tok *tokenizer.Tokenizer
}

func load(path string) (*loaded, error) {
	m, err := model.Load(path)
	if err != nil {
		return nil, fileErr("m", err)
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &loaded{m: m, tok: tok}, nil
}

func (l *loaded) close() { l.m.Close() }

// engine starts an engine on the model.
func (l *loaded) engine(cfg engine.Config) (*engine.Engine, error) {
	return engine.New(l.m, l.tok, cfg)
}

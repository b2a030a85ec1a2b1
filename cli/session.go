package cli

import (
	"fmt"
	"slices"
	"strings"

	"kvscope/engine"
	"kvscope/engine/backend/native"
	"kvscope/engine/chat"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
	"kvscope/loader"
)

// loaded is a model with its tokenizer, on its backend.
type loaded struct {
	m       *model.Model
	tok     *tokenizer.Tokenizer
	backend string // one sentence: which backend runs and why
	format  *chat.Formatter
	fmtErr  error // why the file's chat template cannot be used, if so
}

// load opens a model file and moves it onto the backend called be (see
// native.Choose; "" means $KVSCOPE_BACKEND, else the best that loads),
// through package loader, as the app does. A backend that does not load
// is an error: the one named on the command line is the one that runs.
func load(path, be string) (*loaded, error) {
	l, err := loader.Open(path, loader.Options{Backend: be})
	if err != nil {
		return nil, fileErr("m", err)
	}
	return &loaded{m: l.Model, tok: l.Tok, backend: loader.ShortBackend(l.Backend), format: l.Format, fmtErr: l.FormatErr}, nil
}

// backendFlag defines --backend, checked as it is parsed.
func backendFlag(fs *flagSet) *string {
	name := ""
	fs.Func("backend", "compute `backend`: "+strings.Join(native.Backends, ", ")+" or auto (default $"+native.BackendEnv+", else auto: the first of those that loads)", func(s string) error {
		s = strings.ToLower(s)
		if s != "auto" && !slices.Contains(native.Backends, s) {
			return fmt.Errorf("want one of %s or auto", strings.Join(native.Backends, ", "))
		}
		name = s
		return nil
	})
	return &name
}

func (l *loaded) close() { l.m.Close() }

// chatEngine loads the model for a chat (chat and serve): its chat
// format (an unusable template is an error) and an engine on it. The
// caller closes the engine, then the model.
func chatEngine(path, be string, cfg engine.Config) (*loaded, *engine.Engine, error) {
	l, err := load(path, be)
	if err != nil {
		return nil, nil, err
	}
	if l.fmtErr != nil {
		l.close()
		return nil, nil, l.fmtErr
	}
	e, err := l.engine(cfg)
	if err != nil {
		l.close()
		return nil, nil, err
	}
	return l, e, nil
}

// engine starts an engine on the model.
func (l *loaded) engine(cfg engine.Config) (*engine.Engine, error) {
	return engine.New(l.m, l.tok, cfg)
}

// Package loader opens a model for kvscope's CLI and app alike: a GGUF
// file (or one already in memory, such as the app's demo model), its
// tokenizer, the chat template formatter that kvscope/engine/chat chooses
// for it, on a compute backend chosen by name (native.Choose). Every error
// names the file.
package loader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"kvscope/engine/backend"
	"kvscope/engine/backend/native"
	echat "kvscope/engine/chat"
	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/tokenizer"
)

// Options say how to open a model.
type Options struct {
	// Backend names the compute backend (see native.Choose): "" means
	// $KVSCOPE_BACKEND, else the best that loads.
	Backend string
	// Fallback makes a backend that does not load, or cannot take the
	// model, give way to the best that loads (then to pure Go), saying so
	// in Model.Problems, where without it Open fails. The CLI fails, so
	// that a backend named on the command line is the one that runs; the
	// app falls back, so that a saved choice never keeps a model shut.
	Fallback bool
	// Progress, if not nil, hears how the move of the weights onto the
	// backend goes (the long part of a load: packing them), on the loading
	// goroutine; see model.Progress.
	Progress model.Progress
}

// Model is an open model with what kvscope needs to run it.
type Model struct {
	Model *model.Model
	Tok   *tokenizer.Tokenizer
	// Path is the file, made absolute ("" for a model from memory); Size
	// its bytes; Name general.name, else the file's base name.
	Path string
	Size int64
	Name string
	// Backend says which compute backend runs and why, in one sentence.
	Backend string
	// Format makes the model's prompts: the chat template
	// echat.FromGGUF chooses (the file's, or one its vocabulary's control
	// tokens call for), else plain completion, with FormatErr saying why.
	Format    *echat.Formatter
	FormatErr error
	// Problems are what Fallback gave way on, one sentence each.
	Problems []string
}

// Open opens the GGUF file at path on the backend o names.
func Open(path string, o Options) (*Model, error) { return OpenContext(context.Background(), path, o) }

// OpenContext is Open that stops when ctx is done: then what it had
// loaded is closed (the file unmapped, the weights moved so far freed) and
// the error wraps ctx's (errors.Is(err, context.Canceled) after a cancel).
func OpenContext(ctx context.Context, path string, o Options) (*Model, error) {
	if path == "" {
		return nil, errors.New("no model file given")
	}
	be, note, problems, err := choose(o)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	info, err := os.Stat(path)
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			err = pe.Err // its path is the one named here
		}
		return nil, fmt.Errorf("cannot open model %s: %w", path, err)
	}
	if info.IsDir() {
		return nil, fmt.Errorf("%s is a directory, not a GGUF model file", path)
	}
	m, err := model.Load(path)
	if err != nil {
		return nil, named("cannot load model", path, err)
	}
	l := &Model{Model: m, Path: path, Size: info.Size(), Name: filepath.Base(path), Problems: problems}
	if err := l.finish(ctx, path, be, note, o); err != nil {
		m.Close()
		return nil, err
	}
	return l, nil
}

// FromMemory opens a GGUF file held in data, called name in errors (such
// as "the demo model"), on the backend o names.
func FromMemory(data []byte, name string, o Options) (*Model, error) {
	return FromMemoryContext(context.Background(), data, name, o)
}

// FromMemoryContext is FromMemory that stops when ctx is done, as
// OpenContext does.
func FromMemoryContext(ctx context.Context, data []byte, name string, o Options) (*Model, error) {
	be, note, problems, err := choose(o)
	if err != nil {
		return nil, err
	}
	f, err := gguf.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", name, err)
	}
	m, err := model.New(f)
	if err != nil {
		return nil, fmt.Errorf("cannot load %s: %w", name, err)
	}
	l := &Model{Model: m, Size: int64(len(data)), Name: name, Problems: problems}
	if err := l.finish(ctx, name, be, note, o); err != nil {
		m.Close()
		return nil, err
	}
	return l, nil
}

// Close closes the model's file.
func (l *Model) Close() {
	if l != nil && l.Model != nil {
		l.Model.Close()
	}
}

// choose returns the backend o names, falling back when o says so.
func choose(o Options) (be backend.Backend, note string, problems []string, err error) {
	be, note, err = native.Choose(o.Backend)
	if err != nil {
		if !o.Fallback {
			return nil, "", nil, err
		}
		name := o.Backend
		if name == "" {
			name = os.Getenv(native.BackendEnv)
		}
		problems = append(problems, fmt.Sprintf("The %s backend does not load (%v); the best that does runs instead.", name, err))
		be, note, _ = native.Choose("auto")
	}
	return be, note, problems, nil
}

// finish reads the tokenizer, the name and the chat template of the model
// called what, and moves it onto be, unless ctx is done first.
func (l *Model) finish(ctx context.Context, what string, be backend.Backend, note string, o Options) error {
	m := l.Model
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		return fmt.Errorf("cannot read the tokenizer of %s: %w", what, err)
	}
	l.Tok = tok
	if n, ok := m.File.String("general.name"); ok && strings.TrimSpace(n) != "" {
		l.Name = n
	}
	l.Format = echat.Plain()
	if f, err := echat.FromGGUF(m.File, tok); err != nil {
		l.FormatErr = err
	} else {
		l.Format = f
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("loading %s stopped: %w", what, err)
	}
	if err := m.UseContext(ctx, be, o.Progress); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("loading %s stopped: %w", what, err)
		}
		if !o.Fallback {
			return named("cannot run", what, err)
		}
		l.Problems = append(l.Problems, fmt.Sprintf("%v; the Go backend runs instead.", err))
		m.Use(nil)
		note = "backend go: the fallback"
	}
	l.Backend = note
	return nil
}

// libraryPath matches a compute library's path in a backend's note: a
// folder, then a file named like one of native's libraries.
var libraryPath = regexp.MustCompile(`(?:[A-Za-z]:)?[^\s,()]*[/\\]((?:lib)?kvscope_[A-Za-z0-9_]+\.(?:so|dylib|dll))`)

// ShortBackend is a backend note (Model.Backend, native.Choose's) with
// the compute library's path cut to its file name, for one-line status
// messages; the Model tab and `kvscope info` give the whole path.
func ShortBackend(note string) string {
	return libraryPath.ReplaceAllString(note, "$1")
}

// named says what failed on the file at path, naming it once: err's text
// may name it already.
func named(what, path string, err error) error {
	if strings.Contains(err.Error(), path) {
		return err
	}
	return fmt.Errorf("%s %s: %w", what, path, err)
}

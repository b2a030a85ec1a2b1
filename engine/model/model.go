package model

import (
	"fmt"

	"kvscope/engine/gguf"
	"kvscope/engine/kvstore"
)

// Model is a loaded Llama-family model: its configuration and weights,
// and its state on the backend it computes on (see Use).
type Model struct {
	Config
	W       *Weights
	File    *gguf.File // the file the weights are mapped from
	own     bool       // Close closes File
	compute compute
}

// Load opens and maps a GGUF model file. Close releases it.
func Load(path string) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := New(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.own = true
	return m, nil
}

// New binds a model to an opened GGUF file, which must stay open while the
// model is used.
func New(f *gguf.File) (*Model, error) {
	c, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	w, err := loadWeights(f, c)
	if err != nil {
		return nil, err
	}
	return &Model{Config: c, W: w, File: f}, nil
}

// Close releases the model's memory on its backend, and its file when Load
// opened it.
func (m *Model) Close() error {
	m.release()
	if m.own {
		return m.File.Close()
	}
	return nil
}

// CacheConfig returns a K/V store configuration shaped for this model, with
// the given block size, number of blocks and precisions.
func (m *Model) CacheConfig(blockSize, blocks int, k, v kvstore.Precision) kvstore.Config {
	return kvstore.Config{Layers: m.Layers, KVHeads: m.KVHeads, HeadDim: m.HeadDim, BlockSize: blockSize, Blocks: blocks, K: k, V: v}
}

// Params returns the number of weights (elements) of the model.
func (m *Model) Params() int64 {
	var n int64
	for _, t := range m.File.Tensors {
		n += int64(t.Elements())
	}
	return n
}

package backend

import (
	"kvscope/engine/kvstore"
	"kvscope/engine/quant"
)

// A host backend computes on this process's memory, as the Go backend does,
// and shares its handles: Go's buffers, weights and *kvstore.Store cache.
// The native CPU backend is one; it replaces some of Go's operations and
// keeps the rest. These accessors open the Go backend's handles to it.

// HostFloats returns the values of a buffer made by Go().NewBuffer. It
// panics on another backend's buffer.
func HostFloats(b Buffer) []float32 { return vals(b) }

// HostWeight returns what a weight made by Go().Weight holds: its type,
// shape, bytes (in ggml's layout) and bias (nil when none). It panics on
// another backend's weight.
func HostWeight(w Weight) (t quant.Type, rows, cols int, data []byte, bias []float32) {
	gw := weight(w)
	return gw.t, gw.rows, gw.cols, gw.data, gw.bias
}

// HostStore returns the store behind a cache made by Go().NewCache. It
// panics on another backend's cache.
func HostStore(c Cache) *kvstore.Store { return store(c) }

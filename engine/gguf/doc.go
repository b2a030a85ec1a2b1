// Package gguf provides a bounds-checked, memory-mapped reader for GGUF model
// files (their metadata, tensor descriptions and tensor bytes) and a writer
// for them.
//
// Every count, length, offset and shape in a file is checked against the
// file's size before it is used, so a malformed or truncated file gives an
// error that says what is wrong and at which byte offset, never a panic, and
// the reader never allocates more than the file's own size could justify.
// Tensors may not share bytes, so the sum of their sizes is at most the
// file's size too, and so is whatever a loader builds from them. Tensor
// bytes are not copied: TensorData returns slices of the mapping. Open
// refuses anything but a regular file (a directory, FIFO, device or socket)
// from a stat, before opening it, so a FIFO never blocks it.
//
// Why our own reader: the Go GGUF parsers we looked at
// (github.com/gpustack/gguf-parser-go being the well-kept one) are built to
// estimate memory needs of local or remote files and copy what they read;
// kvscope needs zero-copy access to tensor bytes from a mapping that lives as
// long as the model, and hard, fuzzed guarantees on hostile input. The format
// is small (a header, typed key/value pairs, tensor infos), so the reader is
// short. Supported: GGUF versions 2 and 3, little-endian, every metadata value
// type including nested arrays, and general.alignment.
//
// Write (and Plan, which lays a file out without its tensor data) writes
// GGUF v3 files; package synth uses it to make random models in memory.
package gguf

//go:build !amd64 || noasm

package quant

// macTile computes what macGeneric(rows, vecs, ...) does; without SIMD
// kernels it is macGeneric.
func macTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, acc []float32, as int) {
	checkTile(rows, vecs, w, ws, x, xs, ng, acc, as)
	macGeneric(rows, vecs, w, ws, x, xs, ng, acc, as)
}

//go:build !amd64

package quant

// macTile computes what macGeneric(rows, vecs, ...) does; without SIMD
// kernels it is macGeneric.
func macTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, out []float32, ps int) {
	checkTile(rows, vecs, w, ws, x, xs, ng, out, ps)
	macGeneric(rows, vecs, w, ws, x, xs, ng, out, ps)
}

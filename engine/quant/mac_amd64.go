package quant

// The SSE kernels of mac_amd64.s: macRxV(w, ws, x, xs, ng, out, ps)
// is macGeneric(R, V, ...) on the slices starting at w and x. SSE2 is part of
// every amd64 processor, so they need no feature check.

//go:noescape
func mac4x1(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac2x4(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac2x2(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac2x1(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac1x4(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac1x2(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

//go:noescape
func mac1x1(w *float32, ws int, x *float32, xs int, ng int, out *float32, ps int)

// macTile computes what macGeneric(rows, vecs, ...) does, with the kernel
// of that shape: rows×vecs is one of 4×1, 2×4, 2×2, 2×1, 1×4, 1×2, 1×1.
func macTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, out []float32, ps int) {
	checkTile(rows, vecs, w, ws, x, xs, ng, out, ps)
	if ng == 0 {
		return
	}
	pw, px, po := &w[0], &x[0], &out[0]
	switch rows<<4 | vecs {
	case 4<<4 | 1:
		mac4x1(pw, ws, px, xs, ng, po, ps)
	case 2<<4 | 4:
		mac2x4(pw, ws, px, xs, ng, po, ps)
	case 2<<4 | 2:
		mac2x2(pw, ws, px, xs, ng, po, ps)
	case 2<<4 | 1:
		mac2x1(pw, ws, px, xs, ng, po, ps)
	case 1<<4 | 4:
		mac1x4(pw, ws, px, xs, ng, po, ps)
	case 1<<4 | 2:
		mac1x2(pw, ws, px, xs, ng, po, ps)
	case 1<<4 | 1:
		mac1x1(pw, ws, px, xs, ng, po, ps)
	default:
		macGeneric(rows, vecs, w, ws, x, xs, ng, out, ps)
	}
}

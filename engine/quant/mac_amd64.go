//go:build !noasm

package quant

//go:generate go run macgen.go

// The SSE kernels of mac_amd64.s: macRxV(w, ws, x, xs, ng, acc, as) is
// macGeneric(R, V, ...) on the slices starting at w, x and acc. SSE2 is
// part of every amd64 processor, so they need no feature check; the AVX
// kernels mac4x4avx, mac4x2avx and mac8x1avx run only where cpuHasAVX
// (cpu_amd64.s) says they can.

// cpuHasAVX reports whether the processor and operating system support
// AVX.
func cpuHasAVX() bool

// useAVX reports whether macTile may use the AVX kernels (a variable, so
// that the tests can cover the SSE path too).
var useAVX = cpuHasAVX()

//go:noescape
func mac4x4avx(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac8x1avx(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac4x2avx(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac4x1(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac2x4(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac2x2(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac2x1(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac1x4(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac1x2(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

//go:noescape
func mac1x1(w *float32, ws int, x *float32, xs int, ng int, acc *float32, as int)

// macTile computes what macGeneric(rows, vecs, ...) does, with the kernel
// of that shape: rows×vecs is one of 8×1, 4×4, 4×2, 4×1, 2×4, 2×2, 2×1,
// 1×4, 1×2, 1×1 (8×1 only with as = 4: the eight rows' sums adjacent).
func macTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, acc []float32, as int) {
	checkTile(rows, vecs, w, ws, x, xs, ng, acc, as)
	if ng == 0 {
		return
	}
	pw, px, pa := &w[0], &x[0], &acc[0]
	switch rows<<4 | vecs {
	case 8<<4 | 1:
		if useAVX && as == 4 {
			mac8x1avx(pw, ws, px, xs, ng, pa, as)
		} else {
			mac4x1(pw, ws, px, xs, ng, pa, as)
			mac4x1(&w[4*ws], ws, px, xs, ng, &acc[4*as], as)
		}
	case 4<<4 | 4:
		if useAVX {
			mac4x4avx(pw, ws, px, xs, ng, pa, as)
		} else {
			mac2x4(pw, ws, px, xs, ng, pa, as)
			mac2x4(&w[2*ws], ws, px, xs, ng, &acc[2*as], as)
		}
	case 4<<4 | 2:
		if useAVX {
			mac4x2avx(pw, ws, px, xs, ng, pa, as)
		} else {
			mac2x2(pw, ws, px, xs, ng, pa, as)
			mac2x2(&w[2*ws], ws, px, xs, ng, &acc[2*as], as)
		}
	case 4<<4 | 1:
		mac4x1(pw, ws, px, xs, ng, pa, as)
	case 2<<4 | 4:
		mac2x4(pw, ws, px, xs, ng, pa, as)
	case 2<<4 | 2:
		mac2x2(pw, ws, px, xs, ng, pa, as)
	case 2<<4 | 1:
		mac2x1(pw, ws, px, xs, ng, pa, as)
	case 1<<4 | 4:
		mac1x4(pw, ws, px, xs, ng, pa, as)
	case 1<<4 | 2:
		mac1x2(pw, ws, px, xs, ng, pa, as)
	case 1<<4 | 1:
		mac1x1(pw, ws, px, xs, ng, pa, as)
	default:
		macGeneric(rows, vecs, w, ws, x, xs, ng, acc, as)
	}
}

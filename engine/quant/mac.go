package quant

import "fmt"

// The multiply-accumulate kernels add products of unpacked (dequantized)
// weights and activations to four-lane running sums, always the same way:
// element j of a row goes to lane j%4, in order of j, and a row's dot
// product is (lane0+lane1)+(lane2+lane3) (laneSum). That is the order of a
// four-wide SIMD multiply and add, so the SSE kernels (mac_amd64.s, written
// by macgen.go) give exactly the bits of the pure Go ones (macGeneric). A
// kernel macRxV multiplies R rows by V vectors at once, so that one load
// of a weight or an activation serves several sums; that changes no single
// sum, so every kernel gives the same bits for the same (row, vector) pair,
// and MatMul's result does not depend on the tile it was computed in.
//
// Multiplication and addition are commutative in IEEE arithmetic, so the
// order of the operands within one product or sum does not matter. No
// kernel fuses a multiply with an add: the SSE ones have no such
// instruction, and in the Go ones an explicit float32 conversion of each
// product forbids the compiler to fuse (as it otherwise may on arm64, say),
// so every architecture computes the same bits.

// macGeneric adds, for each row r < rows and vector v < vecs, the products
// of w[r*ws:][:16*ng] and x[v*xs:][:16*ng] to the lanes acc[r*as+4v:][:4].
func macGeneric(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, acc []float32, as int) {
	n := 16 * ng
	for r := range rows {
		wr := w[r*ws : r*ws+n]
		for v := range vecs {
			xv := x[v*xs : v*xs+n]
			a := (*[4]float32)(acc[r*as+4*v:])
			a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
			for j := 0; j+4 <= len(wr) && j+4 <= len(xv); j += 4 {
				a0 += float32(wr[j] * xv[j])
				a1 += float32(wr[j+1] * xv[j+1])
				a2 += float32(wr[j+2] * xv[j+2])
				a3 += float32(wr[j+3] * xv[j+3])
			}
			a[0], a[1], a[2], a[3] = a0, a1, a2, a3
		}
	}
}

// macTail adds the products of w and x (fewer than 16 elements, starting
// at a multiple of 4) to the lanes a: the end of a plain-type row.
func macTail(w, x []float32, a *[4]float32) {
	x = x[:len(w)]
	for j, v := range w {
		a[j%4] += float32(v * x[j])
	}
}

// laneSum is a dot product from its four lanes.
func laneSum(a []float32) float32 { return (a[0] + a[1]) + (a[2] + a[3]) }

// checkTile panics unless macTile's operands hold what it reads and
// writes: an out-of-bounds access by assembly would not be caught.
func checkTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, acc []float32, as int) {
	if rows < 1 || vecs < 1 || ng < 0 || ws < 0 || xs < 0 || rows > 1 && as < 4*vecs ||
		len(w) < (rows-1)*ws+16*ng || len(x) < (vecs-1)*xs+16*ng || len(acc) < (rows-1)*as+4*vecs {
		panic(fmt.Sprintf("quant: bad kernel operands: %d×%d tile, %d groups of 16, %d weights (stride %d), %d activations (stride %d), %d sums (stride %d)",
			rows, vecs, ng, len(w), ws, len(x), xs, len(acc), as))
	}
}

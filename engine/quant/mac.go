package quant

import "fmt"

// The multiply-accumulate kernels compute the products of 16-element
// groups of unpacked weights w with 16-element groups of activations x,
// always the same way (dot16): four lanes, lane l summing w[4k+l]*x[4k+l]
// for k = 0, 1, 2, 3 from zero, then (lane0+lane1)+(lane2+lane3). That is
// the order of a four-wide SIMD multiply and add, so the SSE kernels
// (mac_amd64.s, written by macgen.go) give exactly the bits of the pure Go
// ones (mac_other.go). A kernel macRxV multiplies R rows by V vectors over
// a run of groups, so that one load of a weight or an activation serves
// several sums; that changes no single sum, so every kernel gives the same
// bits for the same (row, vector) pair, and MatMul's result does not depend
// on the tile it was computed in.
//
// Multiplication and addition are commutative in IEEE arithmetic, and no
// kernel fuses a multiply with an add, so the order of the operands within
// one product or sum does not matter.

// dot16 is the product of one group of weights with one group of
// activations, the reference for every kernel.
func dot16(w, x *[16]float32) float32 {
	var a0, a1, a2, a3 float32
	for k := 0; k < 16; k += 4 {
		a0 += w[k] * x[k]
		a1 += w[k+1] * x[k+1]
		a2 += w[k+2] * x[k+2]
		a3 += w[k+3] * x[k+3]
	}
	return (a0 + a1) + (a2 + a3)
}

// dotShort is dot16 for a group of fewer than 16 elements (len(w) <=
// len(x)), at the end of a plain-type row.
func dotShort(w, x []float32) float32 {
	var a [4]float32
	x = x[:len(w)]
	for j, v := range w {
		a[j%4] += v * x[j]
	}
	return (a[0] + a[1]) + (a[2] + a[3])
}

// macGeneric computes with dot16 what macTile computes: for each group g <
// ng, row r < rows and vector v < vecs, out[r*ps+16*v+g] is the product of
// w[r*ws+16g:][:16] and x[v*xs+16g:][:16]. (MatMul keeps 16 groups per
// (row, vector) pair, ps per row.)
func macGeneric(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, out []float32, ps int) {
	for g := range ng {
		for r := range rows {
			wg := (*[16]float32)(w[r*ws+16*g:])
			for v := range vecs {
				out[r*ps+16*v+g] = dot16(wg, (*[16]float32)(x[v*xs+16*g:]))
			}
		}
	}
}

// checkTile panics unless macTile's operands hold what it reads and
// writes: an out-of-bounds read by assembly would not be caught.
func checkTile(rows, vecs int, w []float32, ws int, x []float32, xs int, ng int, out []float32, ps int) {
	if rows < 1 || vecs < 1 || ng < 0 || ng > 16 || ws < 0 || xs < 0 || ps < 16*vecs && rows > 1 ||
		len(w) < (rows-1)*ws+16*ng || len(x) < (vecs-1)*xs+16*ng || len(out) < (rows-1)*ps+16*(vecs-1)+ng {
		panic(fmt.Sprintf("quant: bad kernel operands: %d×%d tile, %d groups, %d weights (stride %d), %d activations (stride %d), %d outputs (stride %d)",
			rows, vecs, ng, len(w), ws, len(x), xs, len(out), ps))
	}
}

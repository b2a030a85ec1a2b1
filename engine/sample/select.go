package sample

import (
	"math"
	"math/bits"
	"slices"
)

var negInf = float32(math.Inf(-1))

// cand is one surviving token: its id and its (penalized) logit.
type cand struct {
	id    int32
	logit float32
}

// better reports whether a ranks before b: higher logit first, and the lower
// id first among equal logits. It is a strict total order (ids are unique),
// which keeps the partial selection below deterministic and free of the
// equal-keys worst case.
func better(a, b cand) bool {
	return a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
}

func compareCand(a, b cand) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}

// sortTop puts the best m elements of a into a[:m] in rank order, assuming
// a[:done] already holds the best done elements in rank order. It runs in
// O(len(a)) expected time plus the sort of the m-done new elements, which is
// far cheaper than sorting all of a when m is small.
func sortTop(a []cand, done, m int) {
	if m > len(a) {
		m = len(a)
	}
	if m <= done {
		return
	}
	rest := a[done:]
	k := m - done
	if k < len(rest) {
		selectTop(rest, k)
	}
	slices.SortFunc(rest[:k], compareCand)
}

// selectTop rearranges a so that a[:k] holds its k best elements, in no
// particular order (a quickselect, with median-of-three pivots and a sort
// as a fallback when the recursion goes too deep). 1 <= k <= len(a).
func selectTop(a []cand, k int) {
	lo, hi := 0, len(a)
	budget := 2 * bits.Len(uint(len(a)))
	for hi-lo > 16 {
		if budget == 0 {
			slices.SortFunc(a[lo:hi], compareCand)
			return
		}
		budget--
		p := lo + partition(a[lo:hi])
		switch {
		case p == k || p == k-1:
			return
		case p > k:
			hi = p
		default:
			lo = p + 1
		}
	}
	slices.SortFunc(a[lo:hi], compareCand)
}

// partition picks a median-of-three pivot, moves every element better than
// it to the front, and returns the pivot's final index.
func partition(a []cand) int {
	last := len(a) - 1
	mid := len(a) / 2
	// Order a[0], a[mid], a[last] so the median lands in a[mid].
	if better(a[mid], a[0]) {
		a[0], a[mid] = a[mid], a[0]
	}
	if better(a[last], a[mid]) {
		a[mid], a[last] = a[last], a[mid]
		if better(a[mid], a[0]) {
			a[0], a[mid] = a[mid], a[0]
		}
	}
	a[mid], a[last] = a[last], a[mid]
	pivot := a[last]
	store := 0
	for i := 0; i < last; i++ {
		if better(a[i], pivot) {
			a[i], a[store] = a[store], a[i]
			store++
		}
	}
	a[store], a[last] = a[last], a[store]
	return store
}

// topK returns the k best tokens of logits above -Inf in rank order, in
// dst's storage (which needs capacity k). It scans logits once, keeping
// a min-heap of the best k seen so far: most tokens cost one comparison with
// the heap's worst entry, so for small k this beats a selection over a
// candidate array.
func topK(logits []float32, k int, dst []cand) []cand {
	h := dst[:0]
	for i, v := range logits {
		if len(h) == k {
			// Ids increase as we scan, so a tie with the worst kept
			// token loses: only a strictly larger logit gets in.
			if !(v > h[0].logit) {
				continue
			}
			h[0] = cand{int32(i), v}
			siftDown(h)
			continue
		}
		if !(v > negInf) {
			continue
		}
		h = append(h, cand{int32(i), v})
		// Sift up: the worst entry (per better) rises to the root.
		for j := len(h) - 1; j > 0; {
			parent := (j - 1) / 2
			if !better(h[parent], h[j]) {
				break
			}
			h[parent], h[j] = h[j], h[parent]
			j = parent
		}
	}
	slices.SortFunc(h, compareCand)
	return h
}

// siftDown restores the heap property of h (worst entry at the root) after
// the root was replaced.
func siftDown(h []cand) {
	j := 0
	for {
		l := 2*j + 1
		if l >= len(h) {
			return
		}
		worst := l
		if r := l + 1; r < len(h) && better(h[l], h[r]) {
			worst = r
		}
		if !better(h[j], h[worst]) {
			return
		}
		h[j], h[worst] = h[worst], h[j]
		j = worst
	}
}

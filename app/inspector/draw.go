// This file holds the pixel helpers the inspector's rasters draw with:
// rectangles, outlines and lines.

package inspector

import (
	"image"
	"image/color"
)

// fillAll paints every pixel of dst with c.
func fillAll(dst *image.RGBA, c color.RGBA) { fillRect(dst, dst.Bounds(), c) }

// fillRect paints r (clipped to dst) with c: one row pixel by pixel, the
// other rows copied from it.
func fillRect(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(dst.Bounds())
	if r.Empty() {
		return
	}
	first := dst.PixOffset(r.Min.X, r.Min.Y)
	row := dst.Pix[first : first+4*r.Dx()]
	px := [4]byte{c.R, c.G, c.B, c.A}
	copy(row, px[:])
	for n := 4; n < len(row); n *= 2 {
		copy(row[n:], row[:n])
	}
	for y := r.Min.Y + 1; y < r.Max.Y; y++ {
		o := dst.PixOffset(r.Min.X, y)
		copy(dst.Pix[o:o+len(row)], row)
	}
}

// outline draws the one-pixel border just inside r.
func outline(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	if r.Empty() {
		return
	}
	fillRect(dst, image.Rect(r.Min.X, r.Min.Y, r.Max.X, r.Min.Y+1), c)
	fillRect(dst, image.Rect(r.Min.X, r.Max.Y-1, r.Max.X, r.Max.Y), c)
	fillRect(dst, image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y), c)
	fillRect(dst, image.Rect(r.Max.X-1, r.Min.Y, r.Max.X, r.Max.Y), c)
}

// Line draws a one-pixel line from a to b (Bresenham), clipped to dst.
func Line(dst *image.RGBA, a, b image.Point, c color.RGBA) {
	dx, dy := abs(b.X-a.X), -abs(b.Y-a.Y)
	sx, sy := 1, 1
	if a.X > b.X {
		sx = -1
	}
	if a.Y > b.Y {
		sy = -1
	}
	e := dx + dy
	bounds := dst.Bounds()
	for {
		if (image.Point{a.X, a.Y}).In(bounds) {
			dst.SetRGBA(a.X, a.Y, c)
		}
		if a == b {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			a.X += sx
		}
		if e2 <= dx {
			e += dx
			a.Y += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

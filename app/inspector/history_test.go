package inspector

import (
	"image"
	"image/color"
	"testing"

	"fyne.io/fyne/v2/test"
)

func TestRenderHistory(t *testing.T) {
	const w, h = 50, 101 // one row a percent
	samples := []Sample{
		{Step: 1, Usage: 10, Internal: 60, External: 0, HitRate: 90},
		{Step: 2, Usage: 20, Internal: 60, External: 40, HitRate: 90},
		{Step: 3, Usage: 100, Internal: 60, External: 40, HitRate: 90},
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	RenderHistory(dst, samples, 10)
	tests := []struct {
		name string
		x, y int
		want color.RGBA
	}{
		{"newest usage at the top right", w - 1, 0, UsageColor},
		{"previous usage one step left", w - 11, 80, UsageColor},
		{"internal fragmentation", w - 1, 40, InternalColor},
		{"external fragmentation", w - 11, 60, ExternalColor},
		{"hit rate", w - 21, 10, HitRateColor},
		{"50 % guide left of the samples", 0, 50, gridColor},
		{"background", 0, 30, Background},
	}
	for _, tc := range tests {
		if got := dst.RGBAAt(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: pixel (%d, %d) = %v, want %v", tc.name, tc.x, tc.y, got, tc.want)
		}
	}
}

func TestHistoryWidgetKeepsCapacity(t *testing.T) {
	test.NewTempApp(t)
	h := NewHistory()
	h.Capacity = 5
	for i := range 8 {
		h.Add(Sample{Step: int64(i), Usage: float64(i)})
	}
	h.Add(Sample{Step: 7, Usage: 99}) // same step: replaces
	got := h.Samples()
	if len(got) != 5 || got[0].Step != 3 || got[4].Usage != 99 {
		t.Errorf("samples %+v, want steps 3…7 with the last replaced", got)
	}
	w := test.NewTempWindow(t, h)
	if img := w.Canvas().Capture(); img.Bounds().Empty() {
		t.Error("history did not draw")
	}
}

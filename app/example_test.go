package app_test

import (
	"fmt"
	"image"
	"image/color"

	"kvscope/app"
)

// RenderSeries draws the teaching charts: here a flat line and a rising
// one, as in the "What the cache buys" lesson.
func ExampleRenderSeries() {
	img := image.NewRGBA(image.Rect(0, 0, 40, 21))
	flat := color.RGBA{0, 0, 255, 255}
	rising := color.RGBA{255, 0, 0, 255}
	top := app.RenderSeries(img, []app.Series{
		{Name: "with the cache", Color: flat, Y: []float64{1, 1, 1, 1, 1}},
		{Name: "without", Color: rising, Y: []float64{1, 2, 4, 6, 10}},
	}, 0)
	fmt.Println("top of the chart:", top, "ms")
	fmt.Println("last point of the rising line at the top right:", img.RGBAAt(39, 0) == rising)
	fmt.Println("flat line near the bottom:", img.RGBAAt(39, 18) == flat)
	// Output:
	// top of the chart: 10 ms
	// last point of the rising line at the top right: true
	// flat line near the bottom: true
}

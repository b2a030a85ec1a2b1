// Package inspector provides kvscope's live KV-cache inspector widgets: a
// heatmap of every block of the pool drawn into one raster image, gauges, a
// usage and fragmentation history chart, and a log of cache events in words.
//
// Everything is driven by the immutable values engine/kvcache publishes
// (*kvcache.Snapshot and kvcache.Event), so drawing never touches the
// engine's live state. The pixel work is done by pure functions (Render,
// RenderHistory) that fill an *image.RGBA: they are what the tests check
// pixel by pixel and what the benchmark times. Fyne has no chart or grid
// widget that scales to tens of thousands of cells (one widget per block
// would be far too slow), which is why the drawing is ours.
//
// The widgets are not safe for concurrent use: call their methods on the
// Fyne UI goroutine (from another goroutine, through fyne.Do).
package inspector

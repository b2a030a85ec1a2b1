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
// A selected sequence's block table is drawn as a path through its blocks
// in logical order. For a model with sliding-window layers (gemma3; see
// Window and Inspector.SetWindow) the blocks holding the sequence's last W
// positions, the only ones those layers still attend, carry a bar along
// their bottom, and a line under the details names the positions and
// logical blocks; the others stay in the table, since the global layers
// read them (a block spans all layers).
//
// The layout is sized for a 1024×700 window and up (the app's test
// TestInspectorReadableAt1024x700 checks it): twelve gauges in four rows
// of three, each tile as wide as its name and value; the history's legend
// two by two beside a chart at least 90 px high; the heatmap's caption and
// the hovered block's details wrapped, never cut, the details in two lines
// where a long block table scrolls.
//
// The widgets are not safe for concurrent use: call their methods on the
// Fyne UI goroutine (from another goroutine, through fyne.Do).
package inspector

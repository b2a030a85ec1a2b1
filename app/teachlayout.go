// This file holds the Inspector tab's layout while a lesson's bar shows
// above the inspector.

package app

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"

	"kvscope/app/inspector"
)

// lessonHeatmap is the least height the heatmap keeps while a lesson's bar
// shows above the inspector.
const lessonHeatmap = 150

// lessonRoom holds the inspector under the lesson's bar (see
// lessonHost). While the bar shows, the inspector is at least as tall as
// it needs with the heatmap lessonHeatmap high; where the window is too
// short for that (1024×700), the inspector scrolls under the bar and the
// heatmap keeps its height.
type lessonRoom struct {
	bar  fyne.CanvasObject
	insp *inspector.Inspector
}

func (r lessonRoom) MinSize(objs []fyne.CanvasObject) fyne.Size {
	m := r.insp.MinSize()
	if r.bar.Visible() {
		m.Height += max(0, lessonHeatmap-r.insp.Heatmap.MinSize().Height)
	}
	return m
}

func (r lessonRoom) Layout(objs []fyne.CanvasObject, size fyne.Size) {
	for _, o := range objs {
		o.Move(fyne.NewPos(0, 0))
		o.Resize(size)
	}
}

// lessonHost is the Inspector tab's content: the lesson's bar above the
// inspector, which scrolls under it where the window is short.
func lessonHost(bar fyne.CanvasObject, insp *inspector.Inspector) *fyne.Container {
	return container.NewBorder(bar, nil, nil, nil, container.NewVScroll(container.New(lessonRoom{bar, insp}, insp)))
}

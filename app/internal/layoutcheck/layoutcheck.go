// Package layoutcheck finds what a Fyne window draws smaller than it
// needs (clipped or ellipsised text), for the app's readability tests.
package layoutcheck

import (
	"fmt"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// CutOff lists what in o's tree is drawn smaller than it needs: an object
// whose size is under its MinSize, a label whose text is shown with an
// ellipsis, a text drawn narrower than its words. Scrolled content and
// list rows (the event log's, one line an event) are not looked into: they
// scroll; rectangles have nothing to read.
func CutOff(o fyne.CanvasObject) []string {
	var out []string
	var walk func(o fyne.CanvasObject, path string)
	walk = func(o fyne.CanvasObject, path string) {
		if o == nil || !o.Visible() {
			return
		}
		name := fmt.Sprintf("%T", o)
		switch x := o.(type) {
		case *widget.Label:
			name = fmt.Sprintf("label %q", x.Text)
		case *canvas.Text:
			name = fmt.Sprintf("text %q", x.Text)
			if strings.HasSuffix(x.Text, "…") {
				out = append(out, path+" > "+name+": cut off with an ellipsis")
			}
		case *canvas.Rectangle, *canvas.Line, *canvas.Circle:
			return
		}
		path += " > " + name
		if min, size := o.MinSize(), o.Size(); min.Width > size.Width+0.5 || min.Height > size.Height+0.5 {
			out = append(out, fmt.Sprintf("%s: %.0f×%.0f, needs %.0f×%.0f", path, size.Width, size.Height, min.Width, min.Height))
		}
		switch x := o.(type) {
		case *container.Scroll, *widget.List:
		case *fyne.Container:
			for _, k := range x.Objects {
				walk(k, path)
			}
		case fyne.Widget:
			for _, k := range test.WidgetRenderer(x).Objects() {
				walk(k, path)
			}
		}
	}
	walk(o, "")
	return out
}

// Labels keeps, of CutOff's findings, those that end at a label or a text:
// what is read (containers above them may be short of their minimum where
// their parts scroll).
func Labels(found []string) []string {
	var out []string
	for _, c := range found {
		i := strings.LastIndex(c, " > ")
		if last := c[i+3:]; strings.HasPrefix(last, "label ") || strings.HasPrefix(last, "text ") {
			out = append(out, c)
		}
	}
	return out
}

// This file holds the app's theme: Fyne's, with colours of readable
// contrast.

package app

import (
	"image/color"
	"math"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
)

// readableTheme is Fyne's default theme with text that meets WCAG AA
// (a contrast of at least 4.5:1) on its background: the default draws
// low-importance labels (captions, footers, hints) in its "disabled"
// colour, about 1.7:1 on the dark background, too faint to read, and its
// light variant's placeholder text (the gauges' names) at 3.5:1.
type readableTheme struct{ fyne.Theme }

// The "disabled" text colours of readableTheme: 5.5:1 on the dark
// background, 5.3:1 on the light one.
var (
	readableDisabledDark  = color.NRGBA{R: 0x8f, G: 0x8f, B: 0x8f, A: 0xff}
	readableDisabledLight = color.NRGBA{R: 0x6b, G: 0x6b, B: 0x6b, A: 0xff}
)

// Readable returns t with readable low-importance text.
func Readable(t fyne.Theme) fyne.Theme { return readableTheme{t} }

// Color returns the theme's colour, the faint text colours replaced.
func (r readableTheme) Color(n fyne.ThemeColorName, v fyne.ThemeVariant) color.Color {
	switch {
	case n == theme.ColorNameDisabled && v == theme.VariantLight, n == theme.ColorNamePlaceHolder && v == theme.VariantLight:
		return readableDisabledLight
	case n == theme.ColorNameDisabled:
		return readableDisabledDark
	}
	return r.Theme.Color(n, v)
}

// Contrast is the WCAG contrast ratio of two colours, from 1 to 21.
func Contrast(a, b color.Color) float64 {
	la, lb := luminance(a), luminance(b)
	if la < lb {
		la, lb = lb, la
	}
	return (la + 0.05) / (lb + 0.05)
}

// luminance is a colour's WCAG relative luminance.
func luminance(c color.Color) float64 {
	r, g, b, _ := c.RGBA()
	lin := func(v uint32) float64 {
		x := float64(v) / 0xffff
		if x <= 0.03928 {
			return x / 12.92
		}
		return math.Pow((x+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(r) + 0.7152*lin(g) + 0.0722*lin(b)
}

package app

import (
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
)

// TestReadableThemeMeetsAA: every text colour a label uses (normal, low
// importance, placeholder) has a contrast of at least 4.5:1 on the
// background, in both variants; the default theme's low-importance text
// does not.
func TestReadableThemeMeetsAA(t *testing.T) {
	th := Readable(theme.DefaultTheme())
	for _, v := range []fyne.ThemeVariant{theme.VariantDark, theme.VariantLight} {
		bg := th.Color(theme.ColorNameBackground, v)
		for _, n := range []fyne.ThemeColorName{theme.ColorNameForeground, theme.ColorNameDisabled, theme.ColorNamePlaceHolder} {
			if c := Contrast(th.Color(n, v), bg); c < 4.5 {
				t.Errorf("variant %d: %s text has a contrast of %.2f:1 on the background, under AA's 4.5:1", v, n, c)
			}
		}
	}
	def := theme.DefaultTheme()
	if c := Contrast(def.Color(theme.ColorNameDisabled, theme.VariantDark), def.Color(theme.ColorNameBackground, theme.VariantDark)); c >= 4.5 {
		t.Logf("the default theme's low-importance text already meets AA (%.2f:1)", c)
	}
}

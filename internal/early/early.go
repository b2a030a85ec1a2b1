// Package early sets up the process's environment before any other
// package of kvscope's initializes.
//
// It is a module of its own, at the import path "early", because Go
// initializes packages in import-path order wherever their imports allow
// (the language specification, since Go 1.21): "early" sorts before
// "fyne.io", so its init runs before Fyne's.
//
// What it does: Fyne's lang package reads the user's locale in its own
// init, and a locale such as C.UTF-8 (Debian's default in containers and
// on servers) is not a language tag it can parse, so every run of the
// binary, headless commands included, printed three "Fyne error: Error
// parsing user locale C" lines. The C and POSIX locales mean no
// translation, so where one is in force with a codeset (C.UTF-8,
// POSIX.utf8) and $LANGUAGE is unset, LANGUAGE is set to "en": Fyne then
// reads English, which is what it falls back to anyway, and gettext
// ignores LANGUAGE under the C locale, so programs kvscope starts see no
// change.
package early

import (
	"os"
	"strings"
)

func init() { quietCLocale(os.Getenv, os.Setenv) }

// quietCLocale sets LANGUAGE=en where the locale in force (the first of
// LC_ALL, LC_MESSAGES and LANG that is set, as gettext reads them) is C or
// POSIX with a codeset and LANGUAGE is unset.
func quietCLocale(getenv func(string) string, setenv func(string, string) error) {
	if getenv("LANGUAGE") != "" {
		return
	}
	for _, name := range []string{"LC_ALL", "LC_MESSAGES", "LANG"} {
		v := getenv(name)
		if v == "" {
			continue
		}
		base, _, coded := strings.Cut(v, ".")
		if coded && (base == "C" || base == "POSIX") {
			setenv("LANGUAGE", "en")
		}
		return
	}
}

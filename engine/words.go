package engine

import (
	"strings"

	"github.com/dustin/go-humanize"
)

// Count writes n and a noun in the form that goes with it, with thousands
// separated: "1 token", "2 tokens", "1,536 blocks", "3 replies". The
// engine's lines use it, and so does the app, so that a thing is counted
// the same way everywhere.
func Count(n int, noun string) string {
	return humanize.Comma(int64(n)) + " " + Plural(n, noun)
}

// Plural returns noun's form for n: "token" for 1, "tokens" otherwise
// ("replies" for "reply", "prefixes" for "prefix").
func Plural(n int, noun string) string {
	if n == 1 || n == -1 || noun == "" {
		return noun
	}
	last := noun[len(noun)-1]
	switch {
	case last == 'y' && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	case last == 's' || last == 'x' || strings.HasSuffix(noun, "ch") || strings.HasSuffix(noun, "sh"):
		return noun + "es"
	}
	return noun + "s"
}

// Bytes writes a size in bytes for people: "256 KiB", "1.5 MiB".
func Bytes(n int64) string {
	if n < 0 {
		return "-" + humanize.IBytes(uint64(-n))
	}
	return humanize.IBytes(uint64(n))
}

// This file holds the heatmap's colour modes: their colours, legends and
// captions.

package inspector

import (
	"fmt"
	"image/color"
	"strings"

	"kvscope/engine/kvcache"
)

// Mode chooses what a heatmap cell's colour says about its block.
type Mode uint8

// The colour modes.
const (
	ByOwner     Mode = iota // which conversation (sequence) holds the block
	ByFill                  // how many of its token slots hold a token
	ByPrecision             // K (upper half) and V (lower half) precision
	ByRefCount              // how many sequences share it
	ByRecency               // steps since last use; the next eviction victims in red
	ByLocation              // device pool or host swap pool
)

var modeNames = [...]string{
	ByOwner:     "owner",
	ByFill:      "fill",
	ByPrecision: "precision",
	ByRefCount:  "ref count",
	ByRecency:   "recency",
	ByLocation:  "device/host",
}

// Modes returns every mode, in menu order.
func Modes() []Mode {
	return []Mode{ByOwner, ByFill, ByPrecision, ByRefCount, ByRecency, ByLocation}
}

// String returns the mode's menu name, such as "ref count".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", m)
}

// ParseMode parses a mode's menu name (any case).
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes() {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("inspector: unknown heatmap mode %q (want owner, fill, precision, ref count, recency or device/host)", s)
}

// The fixed colours of the heatmap. The heatmap has its own dark background
// whatever the Fyne theme, so that these colours read the same in both.
var (
	Background  = color.RGBA{0x16, 0x18, 0x1d, 0xff} // behind and between cells
	FreeColor   = color.RGBA{0x2c, 0x30, 0x3a, 0xff} // a free block (no owner, no cached contents)
	CachedColor = color.RGBA{0x5a, 0x60, 0x6e, 0xff} // a cached block (no owner, kept for prefix reuse)
	MarkColor   = color.RGBA{0xff, 0xff, 0xff, 0xff} // hover outline, shared-block outline, block-table path
	HostColor   = color.RGBA{0xf2, 0x8e, 0x2b, 0xff} // a block in the host swap pool (device/host mode)
	DeviceColor = color.RGBA{0x4e, 0x79, 0xa7, 0xff} // a used device block (device/host mode)
	// ResidualColor is the precision-mode colour of keys still held at f16
	// in a partly filled block whose K precision is int8 or int4 (KIVI's
	// full-precision residual).
	ResidualColor = color.RGBA{0xc6, 0xdb, 0xef, 0xff}
	// VictimColor marks the next eviction victim in recency mode; the
	// following victims fade from it towards VictimLastColor.
	VictimColor     = color.RGBA{0xff, 0x2d, 0x2d, 0xff}
	VictimLastColor = color.RGBA{0xff, 0x9d, 0x2d, 0xff}
)

// ownerPalette holds twelve colours that are easy to tell apart on the dark
// background (Tableau 10 and two more), for conversations.
var ownerPalette = [...]color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, // blue
	{0xf2, 0x8e, 0x2b, 0xff}, // orange
	{0xe1, 0x57, 0x59, 0xff}, // red
	{0x76, 0xb7, 0xb2, 0xff}, // teal
	{0x59, 0xa1, 0x4f, 0xff}, // green
	{0xed, 0xc9, 0x48, 0xff}, // yellow
	{0xb0, 0x7a, 0xa1, 0xff}, // purple
	{0xff, 0x9d, 0xa7, 0xff}, // pink
	{0x9c, 0x75, 0x5f, 0xff}, // brown
	{0xba, 0xb0, 0xac, 0xff}, // grey
	{0x86, 0xbc, 0xf7, 0xff}, // light blue
	{0xa6, 0xd8, 0x54, 0xff}, // lime
}

// OwnerColor returns the colour of owner group g in owner mode: one of
// twelve, by g modulo 12.
func OwnerColor(g int64) color.RGBA {
	i := g % int64(len(ownerPalette))
	if i < 0 {
		i += int64(len(ownerPalette))
	}
	return ownerPalette[i]
}

// precisionColors gives each K/V precision its colour in precision mode.
var precisionColors = map[string]color.RGBA{
	"f32":  {0xb0, 0x7a, 0xa1, 0xff},
	"f16":  {0x4e, 0x79, 0xa7, 0xff},
	"bf16": {0x76, 0xb7, 0xb2, 0xff},
	"q8_0": {0x59, 0xa1, 0x4f, 0xff},
	"int8": {0xed, 0xc9, 0x48, 0xff},
	"fp8":  {0xff, 0x9d, 0xa7, 0xff},
	"int4": {0xe1, 0x57, 0x59, 0xff},
}

// unknownPrecision colours a precision name the table does not know.
var unknownPrecision = color.RGBA{0xba, 0xb0, 0xac, 0xff}

// PrecisionColor returns the colour of a K or V precision name, such as
// "int4", in precision mode.
func PrecisionColor(name string) color.RGBA {
	if c, ok := precisionColors[strings.ToLower(name)]; ok {
		return c
	}
	return unknownPrecision
}

// refColors colour reference counts 1, 2, 3 and 4 or more.
var refColors = [...]color.RGBA{
	{0x4e, 0x79, 0xa7, 0xff}, // 1: private
	{0xed, 0xc9, 0x48, 0xff}, // 2
	{0xf2, 0x8e, 0x2b, 0xff}, // 3
	{0xff, 0x2d, 0x6e, 0xff}, // 4+
}

// RefColor returns the colour of a used block with ref references in
// ref-count mode: blue when private, then yellow, orange and magenta as more
// sequences share it. ref 0 is a cached block's colour.
func RefColor(ref int) color.RGBA {
	switch {
	case ref <= 0:
		return CachedColor
	case ref >= len(refColors):
		return refColors[len(refColors)-1]
	}
	return refColors[ref-1]
}

// The two ends of the fill ramp (a used block with 1 slot filled, and a full
// one) and of the recency ramp (used just now, idle longest).
var (
	fillLow   = color.RGBA{0x1f, 0x4e, 0x3d, 0xff}
	fillHigh  = color.RGBA{0x6b, 0xe5, 0x8f, 0xff}
	hotColor  = color.RGBA{0xff, 0xe0, 0x66, 0xff}
	coldColor = color.RGBA{0x3a, 0x4a, 0x7a, 0xff}
	// cachedHot and cachedCold bound the ramp of cached blocks that are not
	// among the next victims, in recency mode.
	cachedHot  = color.RGBA{0x9a, 0xa0, 0xae, 0xff}
	cachedCold = color.RGBA{0x48, 0x4c, 0x58, 0xff}
)

// lerp mixes a and b: t = 0 gives a, t = 1 gives b.
func lerp(a, b color.RGBA, t float64) color.RGBA {
	if t <= 0 {
		return a
	}
	if t >= 1 {
		return b
	}
	mix := func(x, y uint8) uint8 { return uint8(float64(x) + (float64(y)-float64(x))*t + 0.5) }
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 0xff}
}

// FillColor returns the fill-mode colour of a used block holding filled of
// blockSize slots: dark green when nearly empty, bright green when full.
func FillColor(filled, blockSize int) color.RGBA {
	if blockSize <= 1 {
		return fillHigh
	}
	return lerp(fillLow, fillHigh, float64(filled-1)/float64(blockSize-1))
}

// dim mixes c two thirds of the way to the background: blocks outside the
// selected sequence.
func dim(c color.RGBA) color.RGBA { return lerp(c, Background, 0.68) }

// LegendEntry is one swatch of a mode's legend.
type LegendEntry struct {
	Color color.RGBA // the swatch
	Label string     // what it means
}

// Legend returns the legend of mode m. For owner mode it lists the owner
// groups present in s (at most 12, then a "…" entry), named by name; s and
// name may be nil.
func Legend(m Mode, s *kvcache.Snapshot, group func(kvcache.SeqID) int64, name func(kvcache.SeqID) string) []LegendEntry {
	free := LegendEntry{FreeColor, "free"}
	cached := LegendEntry{CachedColor, "cached (no owner)"}
	switch m {
	case ByOwner:
		var out []LegendEntry
		seen := map[int64]bool{}
		if s != nil {
			for _, q := range s.Seqs {
				g := int64(q.ID)
				if group != nil {
					g = group(q.ID)
				}
				if seen[g] {
					continue
				}
				seen[g] = true
				if len(out) == 12 {
					out = append(out, LegendEntry{unknownPrecision, "…"})
					break
				}
				label := fmt.Sprintf("sequence %d", q.ID)
				if name != nil {
					label = name(q.ID)
				}
				out = append(out, LegendEntry{OwnerColor(g), label})
			}
		}
		return append(out, LegendEntry{MarkColor, "outline: shared"}, cached, free)
	case ByFill:
		return []LegendEntry{{FillColor(1, 16), "1 slot filled"}, {FillColor(8, 16), "half full"},
			{FillColor(16, 16), "full"}, cached, free}
	case ByPrecision:
		out := []LegendEntry{}
		for _, p := range []string{"f32", "f16", "bf16", "q8_0", "int8", "fp8", "int4"} {
			out = append(out, LegendEntry{PrecisionColor(p), p})
		}
		return append(out, LegendEntry{ResidualColor, "f16 key residual"},
			LegendEntry{dim(PrecisionColor("f16")), "cached (dimmed)"}, free)
	case ByRefCount:
		return []LegendEntry{{RefColor(1), "1 (private)"}, {RefColor(2), "2 sharing"},
			{RefColor(3), "3 sharing"}, {RefColor(4), "4 or more"}, {CachedColor, "0 (cached)"}, free}
	case ByRecency:
		return []LegendEntry{{hotColor, "used just now"}, {coldColor, "used, idle long"},
			{VictimColor, "next eviction victim"}, {VictimLastColor, "later victims"},
			{cachedHot, "cached, recent"}, {cachedCold, "cached, old"}, free}
	case ByLocation:
		return []LegendEntry{{DeviceColor, "device, used"}, {CachedColor, "device, cached"},
			free, {HostColor, "host swap pool"}}
	}
	return nil
}

// Caption says in one line how to read mode m.
func Caption(m Mode) string {
	switch m {
	case ByOwner:
		return "Each colour is a conversation; an outlined block is shared by several sequences."
	case ByFill:
		return "Brighter means more token slots filled; dark cells in use are internal fragmentation."
	case ByPrecision:
		return "Upper half: K precision, lower half: V precision; cached blocks are dimmed."
	case ByRefCount:
		return "How many sequences hold each block: shared prefixes and parallel samples stand out."
	case ByRecency:
		return "Yellow was used just now; red cached blocks are the next ones the eviction policy takes."
	case ByLocation:
		return "Blue blocks are in the device pool; orange ones were swapped out to the host pool (listed after the device blocks)."
	}
	return ""
}

package native

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestSearchPlaces checks the search order on made-up layouts: an explicit
// $KVSCOPE_NATIVE_DIR, then beside the executable, then the executable's
// ../lib/kvscope (an install under a prefix), then a source tree's
// native/build (kvscope's own tree only: the executable's, then the
// working directory's), each present only where it applies.
func TestSearchPlaces(t *testing.T) {
	root := t.TempDir()
	tree := filepath.Join(root, "src")
	sub := filepath.Join(tree, "cli", "testdata")
	outside := filepath.Join(root, "elsewhere")
	for _, d := range []string{sub, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(root, "other", "sub")
	for d, mod := range map[string]string{tree: "// kvscope\nmodule kvscope\n\ngo 1.26\n", filepath.Dir(other): "module kvscope/other\n"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(root, "prefix", "bin", "kvscope")
	bin := filepath.Dir(exe)
	lib := filepath.Join(root, "prefix", "lib", "kvscope")
	build := filepath.Join(tree, "native", "build")
	for _, tc := range []struct {
		name         string
		env, exe, wd string
		want         []Place
	}{
		{"installed, run from elsewhere", "", exe, outside, []Place{
			{bin, "beside the executable"}, {lib, "in the executable's ../lib/kvscope"}}},
		{"explicit directory first", "/opt/emu", exe, outside, []Place{
			{"/opt/emu", "in $KVSCOPE_NATIVE_DIR"}, {bin, "beside the executable"}, {lib, "in the executable's ../lib/kvscope"}}},
		{"inside a source tree", "", exe, sub, []Place{
			{bin, "beside the executable"}, {lib, "in the executable's ../lib/kvscope"}, {build, "in the source tree's native/build"}}},
		{"inside another project's tree", "", exe, other, []Place{
			{bin, "beside the executable"}, {lib, "in the executable's ../lib/kvscope"}}},
		{"executable unknown", "/opt/emu", "", tree, []Place{
			{"/opt/emu", "in $KVSCOPE_NATIVE_DIR"}, {build, "in the source tree's native/build"}}},
		{"built in a source tree, run from elsewhere", "", filepath.Join(tree, "kvscope"), outside, []Place{
			{tree, "beside the executable"}, {filepath.Join(root, "lib", "kvscope"), "in the executable's ../lib/kvscope"},
			{build, "in the executable's source tree's native/build"}}},
		{"built in a source tree, run in it", "", filepath.Join(tree, "kvscope"), sub, []Place{
			{tree, "beside the executable"}, {filepath.Join(root, "lib", "kvscope"), "in the executable's ../lib/kvscope"},
			{build, "in the executable's source tree's native/build"}}},
		{"nothing known", "", "", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := searchPlaces(tc.env, tc.exe, tc.wd); !slices.Equal(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestFindOrder checks that the first place holding the library wins, that
// a directory of that name does not count, and that the place found is the
// one reported.
func TestFindOrder(t *testing.T) {
	root := t.TempDir()
	bin, lib, odd := filepath.Join(root, "bin"), filepath.Join(root, "lib"), filepath.Join(root, "odd")
	for _, d := range []string{bin, lib, filepath.Join(odd, LibName())} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	places := []Place{{odd, "odd"}, {bin, "bin"}, {lib, "lib"}}
	put := func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, LibName()), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := find(places, LibName()); ok {
		t.Fatal("found a library where there is none (a directory of its name is not one)")
	}
	for _, tc := range []struct {
		put  string
		want Place
	}{
		{lib, Place{lib, "lib"}}, // only in ../lib/kvscope
		{bin, Place{bin, "bin"}}, // then beside the executable too, which wins
	} {
		put(tc.put)
		f, p, ok := find(places, LibName())
		if !ok || p != tc.want || f != filepath.Join(tc.want.Dir, LibName()) {
			t.Errorf("after adding %s: found %q in %v (%v), want %v", tc.put, f, p, ok, tc.want)
		}
	}
}

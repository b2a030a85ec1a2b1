package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/BurntSushi/toml"

	"kvscope/engine/backend/native"
)

// AppMetadata is the text of FyneApp.toml (the app's name, ID, version and
// build number), which package main embeds and sets before calling Main;
// `kvscope version` reads the version from it.
var AppMetadata []byte

// appDetails is the part of FyneApp.toml that `kvscope version` prints.
type appDetails struct {
	Name    string
	ID      string
	Version string
	Build   int
}

// parseAppMetadata reads the [Details] table of FyneApp.toml's text.
func parseAppMetadata(b []byte) (appDetails, error) {
	if len(b) == 0 {
		return appDetails{}, errors.New("no FyneApp.toml was built in (package main embeds it)")
	}
	var m struct{ Details appDetails }
	if _, err := toml.Decode(string(b), &m); err != nil {
		return appDetails{}, fmt.Errorf("FyneApp.toml: %w", err)
	}
	if m.Details.Version == "" {
		return appDetails{}, errors.New("FyneApp.toml has no Details.Version")
	}
	return m.Details, nil
}

// commit describes the version-control state Go stamped into the binary:
// the revision, its time and whether the tree had changes, or why there is
// none.
func commit(bi *debug.BuildInfo) string {
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	rev := s["vcs.revision"]
	if rev == "" {
		why := "no version control information in the binary: built outside a git clone"
		if s["-buildvcs"] == "false" {
			why = "built with -buildvcs=false"
		}
		return "unknown (" + why + ")"
	}
	if t := s["vcs.time"]; t != "" {
		rev += " (" + t + ")"
	}
	if s["vcs.modified"] == "true" {
		rev += ", with uncommitted changes"
	}
	return rev
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "", stderr)
	if err := fs.parse(args); err != nil {
		return err
	}
	d, err := parseAppMetadata(AppMetadata)
	if err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{GoVersion: runtime.Version()}
	}
	fmt.Fprintf(stdout, "kvscope %s (build %d, %s)\n", d.Version, d.Build, d.ID)
	fmt.Fprintf(stdout, "commit:    %s\n", commit(bi))
	fmt.Fprintf(stdout, "go:        %s %s/%s\n", bi.GoVersion, runtime.GOOS, runtime.GOARCH)
	if lib, err := native.Load(""); err != nil {
		fmt.Fprintf(stdout, "native:    not loaded (this kvscope speaks ABI %d): %s\n", native.ABIVersion, firstLine(err.Error()))
	} else {
		var paths []string
		for _, p := range lib.Paths() {
			paths = append(paths, lib.PathName(p))
		}
		fmt.Fprintf(stdout, "native:    ABI %d, %s\n", native.ABIVersion, lib.Where())
		fmt.Fprintf(stdout, "simd:      %s (this CPU and build run %s)\n", lib.PathName(lib.Path()), strings.Join(paths, ", "))
	}
	fmt.Fprintln(stdout, "backends:")
	auto := ""
	for _, name := range native.Backends {
		if _, note, err := native.Choose(name); err != nil {
			fmt.Fprintf(stdout, "  %-6s no: %s\n", name, firstLine(strings.TrimPrefix(err.Error(), fmt.Sprintf("backend %q: ", name))))
		} else {
			fmt.Fprintf(stdout, "  %-6s loads: %s\n", name, strings.TrimSuffix(strings.TrimPrefix(note, "backend "), ": chosen"))
			auto = cmp.Or(auto, name)
		}
	}
	fmt.Fprintf(stdout, "auto:      %s (the first of %s that loads)\n", auto, strings.Join(native.Backends, ", "))
	return nil
}

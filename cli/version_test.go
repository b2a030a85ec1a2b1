package cli

import (
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"kvscope/engine/backend/native"
)

// useAppMetadata sets AppMetadata to the repository's FyneApp.toml, as
// package main does, for the length of the test.
func useAppMetadata(t *testing.T) appDetails {
	t.Helper()
	b, err := os.ReadFile("../FyneApp.toml")
	if err != nil {
		t.Fatal(err)
	}
	saved := AppMetadata
	t.Cleanup(func() { AppMetadata = saved })
	AppMetadata = b
	d, err := parseAppMetadata(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestVersionCommand(t *testing.T) {
	d := useAppMetadata(t)
	if d.Version == "" || d.Build < 1 || d.ID != "dev.kvscope.app" {
		t.Fatalf("FyneApp.toml details %+v", d)
	}
	for _, spelling := range []string{"version", "--version", "-V"} {
		t.Run(spelling, func(t *testing.T) {
			code, out, errOut := run(t, spelling)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, want := range []string{
				"kvscope " + d.Version + " (build ",
				"\ncommit:    ",
				"\ngo:        " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
				"\nnative:    ",
				"\nbackends:\n",
				"\n  go     loads: go\n",
				"\nauto:      ",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("no %q in\n%s", want, out)
				}
			}
			// Each backend gets one line, saying whether it loads.
			for _, name := range native.Backends {
				if !strings.Contains(out, "\n  "+name+" ") {
					t.Errorf("no line for backend %s in\n%s", name, out)
				}
			}
			// The native line names the library found, or why none loads.
			if lib, err := native.Load(""); err == nil {
				if !strings.Contains(out, "native:    ABI ") || !strings.Contains(out, lib.Where()) || !strings.Contains(out, "simd:      "+lib.PathName(lib.Path())) {
					t.Errorf("native library %s not described in\n%s", lib.Where(), out)
				}
			} else if !strings.Contains(out, "native:    not loaded") {
				t.Errorf("no reason the native library is missing in\n%s", out)
			}
		})
	}
	if code, _, errOut := run(t, "version", "extra"); code != 2 || !strings.Contains(errOut, "kvscope version:") {
		t.Errorf("version with an argument: exit %d, %q", code, errOut)
	}
}

func TestParseAppMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       appDetails
		err        string
	}{
		{"full", "[Details]\nName = \"kvscope\"\nID = \"dev.kvscope.app\"\nVersion = \"1.2.3\"\nBuild = 7\n", appDetails{"kvscope", "dev.kvscope.app", "1.2.3", 7}, ""},
		{"missing", "", appDetails{}, "no FyneApp.toml"},
		{"not toml", "[Details\n", appDetails{}, "FyneApp.toml:"},
		{"no version", "[Details]\nName = \"kvscope\"\n", appDetails{}, "no Details.Version"},
		{"wrong type", "[Details]\nVersion = \"1\"\nBuild = \"one\"\n", appDetails{}, "FyneApp.toml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAppMetadata([]byte(tc.text))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %+v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestCommitLine(t *testing.T) {
	set := func(kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{set("vcs.revision", "abc123", "vcs.time", "2026-12-01T10:00:00Z", "vcs.modified", "false"), "abc123 (2026-12-01T10:00:00Z)"},
		{set("vcs.revision", "abc123", "vcs.modified", "true"), "abc123, with uncommitted changes"},
		{set("-buildvcs", "false"), "unknown (built with -buildvcs=false)"},
		{set(), "unknown (no version control information in the binary: built outside a git clone)"},
	} {
		if got := commit(tc.bi); got != tc.want {
			t.Errorf("commit(%v) = %q, want %q", tc.bi.Settings, got, tc.want)
		}
	}
}

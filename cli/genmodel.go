package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"kvscope/engine/quant"
	"kvscope/engine/synth"
)

// genSeed is the seed of gen-model's random weights: the same preset and
// type always give the same file.
const genSeed = 1

func genModelCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen-model", "--preset NAME [--type T] -o FILE", stderr)
	preset := fs.String("preset", "", "model shape: "+presetNames())
	typ := fs.String("type", "Q4_0", "weight type: F16, Q8_0, Q4_0, Q4_K_M, or another type kvscope writes (Q6_K, BF16 ...)")
	out := fs.String("o", "", "GGUF `file` to write")
	if err := fs.parse(args); err != nil {
		return err
	}
	s, err := presetShape(*preset, *typ)
	if err != nil {
		return fs.usageErr("%v", err)
	}
	if *out == "" {
		return fs.usageErr("no output file given: pass -o FILE.gguf")
	}
	t0 := time.Now()
	n, err := writeModel(s, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %s weights in %s, %s, in %.1f s\n", *out, *preset, humanize.SIWithDigits(float64(s.Params()), 2, ""),
		typeName(s), humanize.IBytes(uint64(n)), time.Since(t0).Seconds())
	return nil
}

// presetNames lists synth.Presets' names for the usage text.
func presetNames() string {
	names := sortedKeys(synth.Presets)
	return strings.Join(names, ", ")
}

// presetShape returns the preset shape name in weight type typ: a type
// package synth writes, or Q4_K_M / Q5_K_M for llama-quantize's mixes.
func presetShape(name, typ string) (synth.Shape, error) {
	s, ok := synth.Presets[name]
	if !ok {
		if name == "" {
			return s, fmt.Errorf("no preset given: pass --preset NAME (%s)", presetNames())
		}
		return s, fmt.Errorf("unknown preset %q: want one of %s", name, presetNames())
	}
	t, medium, ok := parseWeightType(typ)
	if !ok {
		return s, fmt.Errorf("--type %q is not a weight type kvscope can write (F16, Q8_0, Q4_0, Q4_K_M ...)", typ)
	}
	s.Type, s.Medium = t, medium
	if err := s.Validate(); err != nil {
		return s, err
	}
	return s, nil
}

// parseWeightType parses a weight type name, case-insensitive: a type
// package quant can write, or Q4_K_M / Q5_K_M (medium reports the mix).
func parseWeightType(s string) (t quant.Type, medium, ok bool) {
	u := strings.ToUpper(s)
	if base, found := strings.CutSuffix(u, "_M"); found && (base == "Q4_K" || base == "Q5_K") {
		u, medium = base, true
	}
	for t := quant.Type(0); t < 64; t++ {
		if t.Known() && quant.CanQuantize(t) && strings.ToUpper(t.String()) == u {
			return t, medium, true
		}
	}
	return 0, false, false
}

// typeName names a shape's weight type as the command line does.
func typeName(s synth.Shape) string {
	if s.Medium {
		return s.Type.String() + "_M"
	}
	return s.Type.String()
}

// writeModel generates a model of shape s and writes it to path, through
// a temporary file in the same directory renamed into place, so that a
// failed write leaves no partial model. It returns the file's size.
func writeModel(s synth.Shape, path string) (int, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return 0, fmt.Errorf("-o %s is %s, not a file to write", path, fileKind(st.Mode()))
	}
	b, err := synth.Generate(s, genSeed)
	if err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return 0, outErr(path, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, outErr(path, err)
	}
	return len(b), nil
}

// outErr names the -o file in a write error, with the system's reason.
func outErr(path string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		err = pe.Err
	} else if le, ok := errors.AsType[*os.LinkError](err); ok {
		err = le.Err
	}
	return fmt.Errorf("-o %s: %w", path, err)
}

package hub

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"kvscope/engine/gguf"
	"kvscope/engine/model"
	"kvscope/engine/quant"
)

// Local is a GGUF file found on this machine.
type Local struct {
	Path   string // the file as found (in the hub cache, the snapshot's link into blobs)
	Source Source // the tool whose folder it is in
	Repo   string // OWNER/NAME when the folder layout names it, else ""
	Name   string // general.name, when the file has one
	Arch   string // general.architecture
	Size   int64  // bytes
	Quant  string // the quantization: general.file_type's name (Q4_K_M, ...) or the type most of the bytes are in
	Params int64  // number of weights (elements of all tensors)
	// Unsupported says why kvscope cannot run the file, though it reads
	// as GGUF: its architecture, a tensor type or a split into parts; ""
	// when it can.
	Unsupported string
	// Err is why the file could not be read as GGUF; Unsupported and the
	// fields read from the file are empty then.
	Err error
}

// Runnable reports whether kvscope can run the file.
func (l Local) Runnable() bool { return l.Err == nil && l.Unsupported == "" }

// Scan limits: how deep below a folder it looks and how many entries it
// visits in one folder tree, so that a cache variable pointing at the home
// folder does not keep it busy for ever.
const (
	maxDepth   = 8
	maxEntries = 200000
)

// Scan lists the GGUF files in dirs, in the order kvscope, llama.cpp, LM
// Studio, Hugging Face and by path within each, each file once (a file
// reached by two paths, as a hub blob linked from two snapshots, is listed
// where it is first found). Missing folders are skipped. Each file's header
// is read as Inspect does; a broken file is listed with its Err. Scan
// stops early, returning what it found, when ctx is done.
func Scan(ctx context.Context, dirs Dirs) []Local {
	type root struct {
		dir string
		src Source
	}
	roots := []root{{dirs.Kvscope, SourceKvscope}, {dirs.LlamaCpp, SourceLlamaCpp}}
	for _, d := range dirs.LMStudio {
		roots = append(roots, root{d, SourceLMStudio})
	}
	roots = append(roots, root{dirs.HFHub, SourceHFHub})

	var out []Local
	seen := map[string]bool{}
	for _, r := range roots {
		if r.dir == "" || ctx.Err() != nil {
			continue
		}
		paths := findGGUF(ctx, r.dir)
		for _, p := range paths {
			if ctx.Err() != nil {
				break
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				real = p
			}
			if abs, err := filepath.Abs(real); err == nil {
				real = abs
			}
			if seen[real] {
				continue
			}
			seen[real] = true
			l := Inspect(p)
			l.Source = r.src
			l.Repo = repoOf(r.src, r.dir, p)
			out = append(out, l)
		}
	}
	return out
}

// findGGUF returns the paths of the *.gguf files under dir, sorted, not
// following links to folders (a link to a file is followed when read).
func findGGUF(ctx context.Context, dir string) []string {
	var paths []string
	base := strings.Count(filepath.Clean(dir), string(filepath.Separator))
	n := 0
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		n++
		if ctx.Err() != nil || n > maxEntries {
			return filepath.SkipAll
		}
		if err != nil {
			if e != nil && e.IsDir() && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			if p != dir && (strings.HasPrefix(e.Name(), ".") ||
				strings.Count(filepath.Clean(p), string(filepath.Separator))-base > maxDepth) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.EqualFold(filepath.Ext(e.Name()), ".gguf") && !strings.HasPrefix(e.Name(), ".") {
			paths = append(paths, p)
		}
		return nil
	})
	sort.Strings(paths)
	return paths
}

// repoOf reads the repository from a found file's place: kvscope's and LM
// Studio's OWNER/NAME/FILE, the hub cache's models--OWNER--NAME (also when
// another tool keeps a hub-style cache).
func repoOf(src Source, root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return ""
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for i, p := range parts {
		if owner, name, ok := strings.Cut(strings.TrimPrefix(p, "models--"), "--"); ok && strings.HasPrefix(p, "models--") &&
			i+2 < len(parts) && parts[i+1] == "snapshots" {
			return owner + "/" + name
		}
	}
	if (src == SourceKvscope || src == SourceLMStudio) && len(parts) >= 3 {
		return parts[0] + "/" + parts[1]
	}
	return ""
}

// Inspect reads the header of the GGUF file at path (the tensor data is
// mapped, not read). A file that is not GGUF, or is damaged, gives a Local
// with Err set, never a panic.
func Inspect(path string) (l Local) {
	l.Path = path
	st, err := os.Stat(path)
	if err != nil {
		l.Err = err
		return l
	}
	l.Size = st.Size()
	// A mapped file truncated under us faults when read: turn that into
	// an error too.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var f *gguf.File
	defer func() {
		if r := recover(); r != nil {
			l = Local{Path: path, Size: st.Size(), Err: fmt.Errorf("%s: reading the file failed: %v", path, r)}
			if f != nil {
				if e := f.Fault(r); e != nil {
					l.Err = e
				}
			}
		}
		if f != nil {
			f.Close()
		}
	}()
	f, err = gguf.Open(path)
	if err != nil {
		l.Err = err
		return l
	}
	l.Arch, _ = f.String("general.architecture")
	l.Name, _ = f.String("general.name")
	l.Quant = quantOf(f)
	for i := range f.Tensors {
		l.Params += int64(f.Tensors[i].Elements())
	}
	l.Unsupported = unsupported(f)
	return l
}

// unsupported says why kvscope cannot run f, or "".
func unsupported(f *gguf.File) string {
	if n, ok := f.Uint("split.count"); ok && n > 1 {
		k, _ := f.Uint("split.no")
		return fmt.Sprintf("part %d of a model split into %d files; kvscope loads single-file models (merge the parts with llama-gguf-split --merge)", k+1, n)
	}
	if _, err := model.ReadConfig(f); err != nil {
		return err.Error()
	}
	var bad []string
	for i := range f.Tensors {
		t := f.Tensors[i].Type
		if !quant.Supported(t) && !slices.Contains(bad, t.String()) {
			bad = append(bad, t.String())
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Sprintf("tensor type %s is not supported", strings.Join(bad, ", "))
	}
	return ""
}

// fileTypes names llama.cpp's general.file_type values (enum llama_ftype
// in include/llama.h).
var fileTypes = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0",
	37: "TQ2_0", 38: "MXFP4_MOE",
}

// quantOf names f's quantization: general.file_type when it has a known
// value, else the tensor type holding most of the bytes; "" for a file
// with neither.
func quantOf(f *gguf.File) string {
	if v, ok := f.Uint("general.file_type"); ok {
		if s, ok := fileTypes[v]; ok {
			return s
		}
	}
	bytes := map[quant.Type]uint64{}
	for i := range f.Tensors {
		bytes[f.Tensors[i].Type] += f.Tensors[i].Size
	}
	var best quant.Type
	var most uint64
	for t, n := range bytes {
		if n > most || n == most && t < best {
			best, most = t, n
		}
	}
	if most == 0 {
		return ""
	}
	return best.String()
}

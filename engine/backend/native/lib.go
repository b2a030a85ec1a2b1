package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ABIVersion is the version of native/include/kvscope.h this package speaks.
const ABIVersion = 10

// ErrNotFound is wrapped by Load's error when no library file exists where
// it looked.
var ErrNotFound = errors.New("native library not found")

// ErrUnsupported is wrapped by the error of a call whose tensor type or K/V
// precision the library does not implement: run the Go kernel instead.
var ErrUnsupported = errors.New("not implemented by the native library")

// The SIMD paths, numbered as kvscope.h's kvs_path.
const (
	PathScalar     = 0
	PathAVX2       = 1
	PathAVX512     = 2
	PathAVX512VNNI = 3
	PathNEON       = 4
	numPaths       = 5
)

// LibName returns the library's file name on this OS.
func LibName() string {
	if runtime.GOOS == "darwin" {
		return "libkvscope_cpu.dylib"
	}
	return "libkvscope_cpu.so"
}

// Lib is a loaded native library. Its methods may be called from several
// goroutines at once.
type Lib struct {
	file string
	from string // the Place's Why, or "" when opened by file

	abiVersion    func() int32
	setThreads    func(int32) int32
	threads       atomic.Int32 // what setThreads was last given
	cpuFeatures   func() uint32
	pathSupported func(int32) int32
	setPath       func(int32) int32
	path          func() int32
	pathName      func(int32) string
	rowBytes      func(uint32, int64) int64
	actBytes      func(uint32, int64, int64) int64
	quantizeSym   uintptr // kvs_quantize_acts, by purego.SyscallN (before every product)
	matmulSym     uintptr // kvs_matmul, called with purego.SyscallN: a third of a reflected call's cost
	packedBytes   func(uint32, int64, int64) int64
	matmulPSym    uintptr // kvs_matmul_packed, by purego.SyscallN
	matmulPNSym   uintptr // kvs_matmul_packed_n, by purego.SyscallN
	pack          func(uint32, int64, int64, int64, int64, unsafe.Pointer, unsafe.Pointer) int32
	dequantRows   func(uint32, unsafe.Pointer, int64, int64, int64, unsafe.Pointer) int32
	rmsnorm       func(unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, int64, int64, float32) int32
	rope          func(unsafe.Pointer, int64, int64, int64, int64, unsafe.Pointer, float32, float32, unsafe.Pointer, int32) int32
	swiglu        func(unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, int64) int32
	add           func(unsafe.Pointer, unsafe.Pointer, int64) int32
	kvWrite       func(unsafe.Pointer, int32, int64, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer) int32
	sum64         func(unsafe.Pointer, int64, unsafe.Pointer) int32
	attention     func(unsafe.Pointer, unsafe.Pointer, int32, int64, int32, int32, int32, int32, float32, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer, unsafe.Pointer) int32
}

// EnvDir is the environment variable naming a directory to look in first.
const EnvDir = "KVSCOPE_NATIVE_DIR"

// A Place is one directory Load searches, with where it is in words
// ("beside the executable", "in $KVSCOPE_NATIVE_DIR"), which `kvscope
// info` and `kvscope version` print after the library's path.
type Place struct {
	Dir, Why string
}

// SearchPlaces returns where Load looks when given no directory, in order:
// $KVSCOPE_NATIVE_DIR when set (an explicit choice wins over any place
// found by itself), the directory of the executable with symbolic links
// resolved (a tarball's or the developer's layout), ../lib/kvscope beside
// that directory (an install under a prefix: PREFIX/bin/kvscope and
// PREFIX/lib/kvscope), and native/build in kvscope's own source tree
// (sourceRoot: the first go.mod above, if it says module kvscope) holding
// the executable, then in the one holding the working directory.
func SearchPlaces() []Place {
	exe := ""
	if e, err := os.Executable(); err == nil {
		if r, err := filepath.EvalSymlinks(e); err == nil {
			e = r
		}
		exe = e
	}
	wd, _ := os.Getwd()
	return searchPlaces(os.Getenv(EnvDir), exe, wd)
}

// searchPlaces is SearchPlaces given the environment variable's value, the
// executable's resolved path and the working directory ("" for one
// unknown).
func searchPlaces(env, exe, wd string) []Place {
	var ps []Place
	if env != "" {
		ps = append(ps, Place{env, "in $" + EnvDir})
	}
	if exe != "" {
		bin := filepath.Dir(exe)
		ps = append(ps, Place{bin, "beside the executable"},
			Place{filepath.Join(filepath.Dir(bin), "lib", "kvscope"), "in the executable's ../lib/kvscope"})
	}
	// A source tree: the one the executable was built in (go build -o
	// kvscope . at its root; it runs from any folder), then the one the
	// working directory is in (go test, go run).
	var exeRoot string
	if exe != "" {
		if root, ok := sourceRoot(filepath.Dir(exe)); ok {
			exeRoot = root
			ps = append(ps, Place{filepath.Join(root, "native", "build"), "in the executable's source tree's native/build"})
		}
	}
	if root, ok := sourceRoot(wd); ok && root != exeRoot {
		ps = append(ps, Place{filepath.Join(root, "native", "build"), "in the source tree's native/build"})
	}
	return ps
}

// sourceRoot returns the kvscope source tree holding wd: the first
// directory above it with a go.mod, if that go.mod declares module kvscope.
// Another project's tree is no place to load libraries from.
func sourceRoot(wd string) (string, bool) {
	for d := wd; d != ""; d = filepath.Dir(d) {
		if data, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil {
			return d, modulePath(data) == "kvscope"
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", false
}

// modulePath returns the path a go.mod's module directive declares ("" for
// none).
func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// SearchDirs returns the directories of SearchPlaces, in its order.
func SearchDirs() []string {
	var dirs []string
	for _, p := range SearchPlaces() {
		dirs = append(dirs, p.Dir)
	}
	return dirs
}

// find returns the first of places holding a regular file called name, with
// the place it was found in.
func find(places []Place, name string) (string, Place, bool) {
	for _, p := range places {
		f := filepath.Join(p.Dir, name)
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
			return f, p, true
		}
	}
	return "", Place{}, false
}

// Load opens the native library in dir, or, when dir is "", in the first of
// SearchPlaces that has it, and checks its ABI version. The error says what
// was wrong (not found, not loadable, wrong version) in one sentence; a
// missing library's error wraps ErrNotFound.
func Load(dir string) (*Lib, error) {
	places := []Place{{dir, "in the directory given"}}
	if dir == "" {
		places = SearchPlaces()
	}
	f, p, ok := find(places, LibName())
	if !ok {
		dirs := make([]string, len(places))
		for i, p := range places {
			dirs[i] = p.Dir
		}
		return nil, fmt.Errorf("native: %w: no %s in %q (build it with make native)", ErrNotFound, LibName(), dirs)
	}
	l, err := open(f)
	if err != nil {
		return nil, err
	}
	l.from = p.Why
	return l, nil
}

func open(file string) (l *Lib, err error) {
	h, err := purego.Dlopen(file, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("native: cannot load %s: %v", file, err)
	}
	l = &Lib{file: file}
	syms := []struct {
		fn   any
		name string
	}{
		{&l.abiVersion, "kvs_abi_version"},
		{&l.setThreads, "kvs_set_threads"},
		{&l.cpuFeatures, "kvs_cpu_features"},
		{&l.pathSupported, "kvs_path_supported"},
		{&l.setPath, "kvs_set_path"},
		{&l.path, "kvs_path"},
		{&l.pathName, "kvs_path_name"},
		{&l.rowBytes, "kvs_row_bytes"},
		{&l.actBytes, "kvs_act_bytes"},
		{&l.quantizeSym, "kvs_quantize_acts"},
		{&l.matmulSym, "kvs_matmul"},
		{&l.packedBytes, "kvs_packed_bytes"},
		{&l.matmulPSym, "kvs_matmul_packed"},
		{&l.matmulPNSym, "kvs_matmul_packed_n"},
		{&l.pack, "kvs_pack"},
		{&l.dequantRows, "kvs_dequant_rows"},
		{&l.rmsnorm, "kvs_rmsnorm"},
		{&l.rope, "kvs_rope"},
		{&l.swiglu, "kvs_swiglu"},
		{&l.add, "kvs_add"},
		{&l.kvWrite, "kvs_kv_write"},
		{&l.attention, "kvs_attention"},
		{&l.sum64, "kvs_sum64"},
	}
	// The version first: a library of another version may lack the rest.
	for i, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("native: %s lacks the function %s, so it is not a kvscope ABI %d library (rebuild it with make native)", file, s.name, ABIVersion)
		}
		if u, ok := s.fn.(*uintptr); ok {
			*u = p
			continue
		}
		purego.RegisterFunc(s.fn, p)
		if i == 0 {
			if v := l.abiVersion(); v != ABIVersion {
				return nil, fmt.Errorf("native: %s has ABI version %d but this kvscope needs %d (rebuild it with make native)", file, v, ABIVersion)
			}
		}
	}
	return l, nil
}

// split makes the library's threads follow GOMAXPROCS (the library splits
// its large kernels between the caller and threads of its own; see
// native/cpu/pool.c for why not goroutines), and returns that count.
func (l *Lib) split() int {
	n := min(runtime.GOMAXPROCS(0), maxThreads)
	if int(l.threads.Load()) != n {
		l.setThreads(int32(n))
		l.threads.Store(int32(n))
	}
	return n
}

// maxThreads is kvscope.h's KVS_MAX_THREADS.
const maxThreads = 64

// File returns the path of the loaded library.
func (l *Lib) File() string { return l.file }

// From says where in the search the library was found ("beside the
// executable", "in $KVSCOPE_NATIVE_DIR": a Place's Why), or "" for a
// library opened otherwise.
func (l *Lib) From() string { return l.from }

// Where is the library's path followed by where the search found it, as
// `kvscope info` prints it.
func (l *Lib) Where() string {
	if l.from == "" {
		return l.file
	}
	return l.file + ", found " + l.from
}

// Features returns the CPU feature bits the library detected (kvscope.h's
// KVS_CPU_*).
func (l *Lib) Features() uint32 { return l.cpuFeatures() }

// Paths returns the SIMD paths this library and CPU can run, scalar first.
func (l *Lib) Paths() []int {
	var ps []int
	for p := range numPaths {
		if l.pathSupported(int32(p)) != 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// Path returns the path in force.
func (l *Lib) Path() int { return int(l.path()) }

// Accelerated reports whether the path in force uses SIMD. The scalar path
// is the reference the others are tested against, several times slower
// than engine/quant's Go kernels: without SIMD, use those.
func (l *Lib) Accelerated() bool { return l.Path() != PathScalar }

// PathName returns the name of path p, such as "avx2".
func (l *Lib) PathName(p int) string { return l.pathName(int32(p)) }

// SetPath makes every later call run path p (-1: the fastest this CPU
// runs). It fails when the CPU or build cannot run p. It is for tests and
// benchmarks: calls in flight may run either path (both give the same bits).
func (l *Lib) SetPath(p int) error {
	if l.setPath(int32(p)) != 0 {
		return fmt.Errorf("native: this CPU or build cannot run the %s path", l.PathName(p))
	}
	return nil
}

// status turns a kvs_status into an error naming the operation.
func status(op string, rc int32) error {
	switch rc {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("native: %s: %w", op, ErrUnsupported)
	case -2:
		return fmt.Errorf("native: %s: the library refused the arguments as out of range", op)
	}
	return fmt.Errorf("native: %s: status %d", op, rc)
}

package cli

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"kvscope/engine"
)

// maxIDsSize bounds the --ids file: far more ids than any context holds.
const maxIDsSize = 1 << 28

// logitsCmd is kvscope logits: the logits of every position of a sequence
// of ids run as one sequence from position 0 (teacher-forced), written as
// llama.cpp's reference files are: little-endian float32, [ids][vocab].
func logitsCmd(args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlags("logits", "-m FILE --ids IDS.txt -o OUT.f32", stderr)
	path := fs.String("m", "", "GGUF model `file`")
	idsPath := fs.String("ids", "", "`file` of whitespace-separated token ids (such as parity.ids)")
	outPath := fs.String("o", "", "output `file`: little-endian float32 logits, one row of the vocabulary per id")
	cfg := engine.DefaultConfig()
	addCacheFlags(fs, &cfg)
	be := backendFlag(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if err := requireModel(*path); err != nil {
		return err
	}
	switch {
	case *idsPath == "":
		return fs.usageErr("no ids given: pass --ids FILE")
	case *outPath == "":
		return fs.usageErr("no output given: pass -o FILE.f32")
	}
	ids, err := readIDs(*idsPath)
	if err != nil {
		return err
	}
	l, err := load(*path, *be)
	if err != nil {
		return err
	}
	defer l.close()
	vocab := l.m.Vocab
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("--ids %s: id %d (number %d) is outside the vocabulary (0..%d)", *idsPath, id, i+1, vocab-1)
		}
	}
	ctx := l.m.Context
	if cfg.Context > 0 {
		ctx = cfg.Context
	}
	if len(ids) > ctx {
		return fmt.Errorf("--ids %s: %d ids are more than the context of %d tokens", *idsPath, len(ids), ctx)
	}
	w, err := newAtomicFile(*outPath)
	if err != nil {
		return err
	}
	defer w.abort()
	buf := make([]byte, 4*vocab)
	var werr error
	err = teacherForced(l.m, ids, cfg.Cache, len(ids), func(_ int, logits []float32) {
		for i, x := range logits {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
		}
		if werr == nil {
			_, werr = w.Write(buf)
		}
	})
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("-o %s: %w", *outPath, werr)
	}
	if err := w.commit(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%d × %d logits written to %s; %s\n", len(ids), vocab, *outPath, l.backend)
	return nil
}

// readIDs reads a file of whitespace-separated token ids: at least one,
// each a non-negative integer.
func readIDs(path string) ([]int, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileErr("ids", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("--ids %s is %s, not a file of ids", path, fileKind(st.Mode()))
	}
	if st.Size() > maxIDsSize {
		return nil, fmt.Errorf("--ids %s: larger than %d MiB", path, maxIDsSize>>20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fileErr("ids", err)
	}
	var ids []int
	for i, f := range strings.Fields(string(b)) {
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--ids %s: %q (number %d) is not a token id", path, firstLine(f), i+1)
		}
		ids = append(ids, int(id))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--ids %s holds no ids", path)
	}
	return ids, nil
}

// atomicFile is an output file written beside its final path and renamed
// there on commit, so that a failure leaves no half-written file.
type atomicFile struct {
	f    *os.File
	w    *bufio.Writer
	path string
	done bool
}

// newAtomicFile starts writing the file at path (flag -o).
func newAtomicFile(path string) (*atomicFile, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("-o %s is %s, not a file to write", path, fileKind(st.Mode()))
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("-o %s: %w", path, err)
	}
	return &atomicFile{f: f, w: bufio.NewWriterSize(f, 1<<20), path: path}, nil
}

func (a *atomicFile) Write(p []byte) (int, error) { return a.w.Write(p) }

// commit flushes, syncs and renames the file to its path.
func (a *atomicFile) commit() error {
	err := a.w.Flush()
	if err == nil {
		err = a.f.Sync()
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.f.Name(), a.path)
	}
	if err != nil {
		os.Remove(a.f.Name())
		a.done = true
		return fmt.Errorf("-o %s: %w", a.path, err)
	}
	a.done = true
	return nil
}

// abort removes the temporary file unless commit ran.
func (a *atomicFile) abort() {
	if !a.done {
		a.f.Close()
		os.Remove(a.f.Name())
	}
}

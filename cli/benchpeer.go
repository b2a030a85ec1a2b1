package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Binaries of llama.cpp that bench speed runs.
const (
	llamaBench        = "llama-bench"
	llamaBatchedBench = "llama-batched-bench"
)

// peerTimeout bounds one llama.cpp run.
const peerTimeout = 10 * time.Minute

// findPeer returns dir if it holds both llama.cpp benchmarks, else "".
func findPeer(dir string) string {
	if dir == "" {
		return ""
	}
	for _, b := range []string{llamaBench, llamaBatchedBench} {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return ""
		}
	}
	return dir
}

// peerSpeed runs llama-bench and llama-batched-bench on the model file
// with o's settings and returns their tokens/s by test name.
func peerSpeed(dir, path string, o speedOpts) (map[string]float64, error) {
	t := strconv.Itoa(o.threads)
	out, err := runPeer(filepath.Join(dir, llamaBench), "-m", path, "-t", t,
		"-p", strconv.Itoa(o.prompt), "-n", strconv.Itoa(o.gen), "-r", strconv.Itoa(o.reps), "-o", "csv")
	if err != nil {
		return nil, err
	}
	bench, err := parseLlamaBench(bytes.NewReader(out))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", llamaBench, err)
	}
	// llama-batched-bench prints its results through llama.cpp's
	// asynchronous log, which loses the lines still queued when the
	// process exits: a last test of one sequence, whose result is not
	// used, gives the others time to come out, and a run that lost one
	// anyway is repeated once.
	var npl []string
	for _, n := range o.seqs {
		npl = append(npl, strconv.Itoa(n))
	}
	npl = append(npl, "1")
	kvSize := max(4096, slices.Max(o.seqs)*(o.prompt+o.batchTG))
	var batched map[string]float64
	for try := 0; ; try++ {
		out, err = runPeer(filepath.Join(dir, llamaBatchedBench), "-m", path, "-t", t, "-c", strconv.Itoa(kvSize),
			"-npp", strconv.Itoa(o.prompt), "-ntg", strconv.Itoa(o.batchTG), "-npl", strings.Join(npl, ","), "--output-format", "jsonl")
		if err != nil {
			return nil, err
		}
		batched, err = parseBatchedBench(bytes.NewReader(out))
		if err == nil {
			for _, n := range o.seqs {
				if _, ok := batched[batchTest(n, o.prompt)]; !ok {
					err = fmt.Errorf("its output has no result for %d sequences", n)
				}
			}
		}
		if err == nil || try == 1 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", llamaBatchedBench, err)
	}
	maps.Copy(bench, batched)
	return bench, nil
}

// runPeer runs a llama.cpp binary and returns its standard output; a
// failure names the binary and the last line it wrote on stderr.
func runPeer(bin string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		last := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		if last != "" {
			return nil, fmt.Errorf("%s: %v: %s", filepath.Base(bin), err, last)
		}
		return nil, fmt.Errorf("%s: %v", filepath.Base(bin), err)
	}
	return stdout.Bytes(), nil
}

// parseLlamaBench reads llama-bench's CSV output (-o csv) and returns the
// average tokens/s of each test, under the names of bench speed's rows:
// pp tests (n_prompt > 0, n_gen 0) and tg tests (n_prompt 0, n_gen > 0).
func parseLlamaBench(r io.Reader) (map[string]float64, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("reading its CSV output: %w", err)
	}
	if len(recs) < 2 {
		return nil, fmt.Errorf("its CSV output has no results")
	}
	col := map[string]int{}
	for i, name := range recs[0] {
		col[name] = i
	}
	for _, name := range []string{"n_prompt", "n_gen", "avg_ts"} {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("its CSV output has no %s column", name)
		}
	}
	res := map[string]float64{}
	for _, rec := range recs[1:] {
		p, err1 := strconv.Atoi(rec[col["n_prompt"]])
		n, err2 := strconv.Atoi(rec[col["n_gen"]])
		ts, err3 := strconv.ParseFloat(rec[col["avg_ts"]], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("its CSV row %q has bad numbers", strings.Join(rec, ","))
		}
		switch {
		case p > 0 && n == 0:
			res[ppTest(p)] = ts
		case p == 0 && n > 0:
			res[tgTest(n)] = ts
		}
	}
	return res, nil
}

// batchedResult is one line of llama-batched-bench's JSONL output: the
// prompt and generated tokens per sequence, the sequences, and the
// aggregate decode rate.
type batchedResult struct {
	PP      *int     `json:"pp"`
	TG      *int     `json:"tg"`
	PL      *int     `json:"pl"`
	SpeedTG *float64 `json:"speed_tg"`
}

func has(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// parseBatchedBench reads llama-batched-bench's JSONL output
// (--output-format jsonl) and returns each test's aggregate decode
// tokens/s under the names of bench speed's rows; of tests repeated with
// the same counts, the first.
func parseBatchedBench(r io.Reader) (map[string]float64, error) {
	res := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var b batchedResult
		if err := json.Unmarshal([]byte(line), &b); err != nil {
			return nil, fmt.Errorf("its JSON line %q: %w", line, err)
		}
		if b.PP == nil || b.TG == nil || b.PL == nil || b.SpeedTG == nil {
			return nil, fmt.Errorf("its JSON line %q lacks pp, tg, pl or speed_tg", line)
		}
		if k := batchTest(*b.PL, *b.PP); !has(res, k) { // the first of repeated tests
			res[k] = *b.SpeedTG
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("its output has no results")
	}
	return res, nil
}

// peerCopy names the folder under the bench's folder that holds
// usablePeer's copy of llama.cpp's binaries.
const peerCopy = "llama.cpp-bin"

// usablePeer runs the usable-bin.sh found beside the peer's bin folder,
// copying bin to a folder under dir without the CPU variants that crash on
// this machine, and returns that folder and the script's last line (which
// variant ggml loads from it). It returns "" when there is no script.
func usablePeer(peer, dir string) (string, string, error) {
	script := filepath.Join(filepath.Dir(peer), "usable-bin.sh")
	if _, err := os.Stat(script); err != nil {
		return "", "", nil
	}
	dst := filepath.Join(dir, peerCopy)
	ctx, cancel := context.WithTimeout(context.Background(), peerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script, dst)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", "", fmt.Errorf("%s: %v: %s", script, err, firstLine(stderr.String()))
	}
	if findPeer(dst) == "" {
		return "", "", fmt.Errorf("%s left no llama-bench and llama-batched-bench in %s", script, dst)
	}
	variant := strings.TrimSpace(stdout.String())
	if dropped := strings.TrimSpace(stderr.String()); dropped != "" {
		variant += " (" + strings.ReplaceAll(dropped, "\n", "; ") + ")"
	}
	if variant == "" {
		variant = "the variant ggml loads is not known"
	}
	return dst, variant, nil
}

package testshared

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
)

// IDs reads a file of whitespace-separated token ids, failing the test on
// error (use Path first to skip when the data is missing).
func IDs(t testing.TB, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := parseIDs(string(b))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ids
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Fields(s) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Logits reads a little-endian float32 file of rows of vocab values.
func Logits(t testing.TB, path string, vocab int) [][]float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%(4*vocab) != 0 {
		t.Fatalf("%s: %d bytes is not a whole number of %d-value rows", path, len(b), vocab)
	}
	rows := make([][]float32, len(b)/(4*vocab))
	for r := range rows {
		rows[r] = make([]float32, vocab)
		for i := range rows[r] {
			rows[r][i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(r*vocab+i):]))
		}
	}
	return rows
}

// GreedyCase is one prompt of reference/stories260K-greedy.txt with
// llama.cpp's greedy continuation.
type GreedyCase struct {
	Prompt    string
	PromptIDs []int // with BOS
	OutputIDs []int
	Output    string
}

// Greedy reads a greedy-continuation reference file: blocks of "prompt:",
// "prompt_ids:", "output_ids:" and "output_text:" lines, where the text may
// run over several lines until the next "prompt:" line.
func Greedy(t testing.TB, path string) []GreedyCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []GreedyCase
	var text *strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		key, val, _ := strings.Cut(line, ": ")
		switch {
		case key == "prompt":
			finishText(cases, text)
			text = nil
			cases = append(cases, GreedyCase{Prompt: val})
		case key == "prompt_ids" && len(cases) > 0:
			cases[len(cases)-1].PromptIDs, err = parseIDs(val)
		case key == "output_ids" && len(cases) > 0:
			cases[len(cases)-1].OutputIDs, err = parseIDs(val)
		case strings.HasPrefix(line, "output_text:") && len(cases) > 0:
			text = &strings.Builder{}
			text.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "output_text:"), " "))
		case text != nil:
			text.WriteString("\n" + line)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	finishText(cases, text)
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return cases
}

func finishText(cases []GreedyCase, text *strings.Builder) {
	if text != nil && len(cases) > 0 {
		// The blank line that separates cases is not part of the text.
		cases[len(cases)-1].Output = strings.TrimSuffix(text.String(), "\n")
	}
}

// Compare returns the RMS difference between got and want relative to
// want's standard deviation, and the mean KL(want ‖ got) of their softmaxes
// per row.
func Compare(got, want [][]float32) (relRMS, meanKL float64, err error) {
	if len(got) != len(want) {
		return 0, 0, fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	var se, sum, sumSq float64
	var n int
	for r := range want {
		if len(got[r]) != len(want[r]) {
			return 0, 0, fmt.Errorf("row %d: %d values, want %d", r, len(got[r]), len(want[r]))
		}
		for i, w := range want[r] {
			d := float64(got[r][i]) - float64(w)
			se += d * d
			sum += float64(w)
			sumSq += float64(w) * float64(w)
			n++
		}
		meanKL += KL(want[r], got[r])
	}
	mean := sum / float64(n)
	std := math.Sqrt(sumSq/float64(n) - mean*mean)
	return math.Sqrt(se/float64(n)) / std, meanKL / float64(len(want)), nil
}

// KL returns KL(softmax(p) ‖ softmax(q)) for two logit vectors.
func KL(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return kl
}

func logSoftmax(x []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - mx)
	}
	ls := math.Log(s) + mx
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - ls
	}
	return out
}

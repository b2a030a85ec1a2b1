package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kvscope/internal/testshared"
)

// speedArgs run bench speed on the small preset with tiny counts.
var speedArgs = []string{"bench", "speed", "--preset", "small", "--types", "Q4_0,Q8_0", "-p", "16", "-n", "4", "-r", "1",
	"-ntg", "2", "--npl", "1,3", "--ctx", "64", "--ctx-gen", "2"}

// speedRowNames are the rows of a table of speedArgs, in order.
var speedRowNames = []string{
	"prefill, 16-token prompt",
	"decode, 1 sequence, 4 tokens",
	"decode, 1 sequence after 16",
	"decode, 3 sequences after 16 (aggregate)",
	"decode at 64 context, f16 K/V",
	"decode at 64 context, int8 K/V",
	"decode at 64 context, int4 K/V",
}

// TestBenchSpeedTable runs bench speed's whole path on the small preset,
// without llama.cpp and, where the shared build is there, with it, and
// checks the tables' structure: one per type, every test, a positive rate
// from kvscope, and llama.cpp's column only when it ran.
func TestBenchSpeedTable(t *testing.T) {
	peerDir := filepath.Join(testshared.Dir(), "peers", "llama.cpp", "bin")
	for _, tc := range []struct {
		name   string
		peer   string
		cols   int // values in a row: kvscope's, [llama.cpp's, the ratio, the rounds' median ratio,] the bandwidth limit
		rounds string
	}{
		{"no peer", "", 2, "1"},
		{"llama.cpp", peerDir, 5, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.peer != "" && findPeer(tc.peer) == "" {
				t.Skipf("no llama.cpp build in %s", tc.peer)
			}
			dir := t.TempDir()
			code, out, stderr := run(t, append(speedArgs, "--peer", tc.peer, "--dir", dir, "--rounds", tc.rounds)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if (tc.peer == "") != strings.Contains(out, "llama.cpp: not run") {
				t.Errorf("peer %q, but the output says:\n%s", tc.peer, out)
			}
			tables := strings.Split(out, "\nsmall ")
			if len(tables) != 3 || !strings.HasPrefix(tables[1], "Q4_0: ") || !strings.HasPrefix(tables[2], "Q8_0: ") {
				t.Fatalf("want a header and a table for Q4_0 and Q8_0:\n%s", out)
			}
			for _, tbl := range tables[1:] {
				lines := strings.Split(strings.TrimRight(tbl, "\n"), "\n")
				if !strings.Contains(lines[0], "of weights read per token") {
					t.Errorf("table title %q names no weight bytes", lines[0])
				}
				if (tc.rounds == "2") != strings.Contains(lines[0], "the best of 2 rounds") {
					t.Errorf("%s rounds, but the title says %q", tc.rounds, lines[0])
				}
				rows := lines[2:]
				for len(rows) > 0 && strings.HasPrefix(rows[len(rows)-1], "cold start") {
					rows = rows[:len(rows)-1] // under go test: not run, no kvscope binary
				}
				if strings.HasPrefix(rows[len(rows)-1], "llama.cpp failed") {
					t.Logf("%s", rows[len(rows)-1]) // its lost-log bug; the table is still whole
					rows = rows[:len(rows)-1]
				}
				var shares []string // one sequence's decode against the bandwidth of the same seconds
				for len(rows) > 0 && strings.Contains(rows[len(rows)-1], "of the rate that the read bandwidth of the same seconds allows") {
					shares = append([]string{rows[len(rows)-1]}, shares...)
					rows = rows[:len(rows)-1]
				}
				if len(shares) != 2 || !strings.HasPrefix(shares[0], speedRowNames[1]+": ") || !strings.HasPrefix(shares[1], speedRowNames[2]+": ") {
					t.Errorf("want the shares of the read rate beside the two single-sequence decode tests, got %q", shares)
				}
				for _, sh := range shares {
					pct := strings.Fields(sh[strings.Index(sh, ": ")+2:])[0]
					if v, err := strconv.ParseFloat(strings.TrimSuffix(pct, "%"), 64); err != nil || v <= 0 {
						t.Errorf("%q: the share %q is not a positive percentage", sh, pct)
					}
				}
				if len(rows) != len(speedRowNames) {
					t.Fatalf("%d rows, want %d:\n%s", len(rows), len(speedRowNames), tbl)
				}
				for i, row := range rows {
					name := strings.TrimSpace(row)
					if !strings.HasPrefix(name, speedRowNames[i]) {
						t.Errorf("row %d is %q, want %q", i, name, speedRowNames[i])
						continue
					}
					f := strings.Fields(strings.TrimPrefix(name, speedRowNames[i]))
					if len(f) != tc.cols {
						t.Errorf("row %q has %d values, want %d", row, len(f), tc.cols)
						continue
					}
					if v, err := strconv.ParseFloat(f[0], 64); err != nil || v <= 0 {
						t.Errorf("row %q: kvscope's rate %q is not a positive number", row, f[0])
					}
					if last := f[len(f)-1]; (i == 0) != (last == "–") {
						t.Errorf("row %q: bandwidth limit %q (only prefill has none)", row, last)
					}
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("the model files were left in %s: %v", dir, entries)
			}
		})
	}
}

// TestRunCold runs commands as bench speed's cold start does: the wall
// time, a peak RSS, kvscope run's prompt rate read from its summary on
// stderr, and a failing command's error with its last words.
func TestRunCold(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	r := runCold(sh, "-c", "echo 'prompt: 5 tokens in 0.100 s (50.0 tokens/s); generation: 1 tokens' >&2")
	if r.err != nil || r.prefill != 50 || r.wall <= 0 {
		t.Errorf("got %+v, want a 50 tokens/s prompt and no error", r)
	}
	if r := runCold(sh, "-c", "echo 'no model here' >&2; exit 3"); r.err == nil || !strings.Contains(r.err.Error(), "no model here") {
		t.Errorf("a failing run gave %v", r.err)
	}
}

// TestBestRows checks that rounds keep each engine's best figure per row
// (kvscope's with the share of the read rate beside that round's test),
// and every round's ratio and share, whose medians the table shows.
func TestBestRows(t *testing.T) {
	a := []speedRow{{test: "x", ours: 3, theirs: 5, limit: 9, ratios: []float64{0.6}}, {test: "y", ours: 2, besideBW: 5, share: 0.7, shares: []float64{0.7}}}
	b := []speedRow{{test: "x", ours: 4, theirs: 1, limit: 9, ratios: []float64{4}}, {test: "y", ours: 1, besideBW: 2, share: 0.9, shares: []float64{0.9}}}
	c := []speedRow{{test: "x", ours: 1, theirs: 1, limit: 9, ratios: []float64{1}}, {test: "y", ours: 1, besideBW: 1, share: 0.95, shares: []float64{0.95}}}
	got := bestRows(bestRows(bestRows(nil, a), b), c)
	want := []speedRow{{test: "x", ours: 4, theirs: 5, limit: 9, ratios: []float64{0.6, 4, 1}}, {test: "y", ours: 2, besideBW: 5, share: 0.7, shares: []float64{0.7, 0.9, 0.95}}}
	same := func(p, q speedRow) bool {
		return p.test == q.test && p.ours == q.ours && p.theirs == q.theirs && p.limit == q.limit && slices.Equal(p.ratios, q.ratios) &&
			p.besideBW == q.besideBW && p.share == q.share && slices.Equal(p.shares, q.shares)
	}
	if !slices.EqualFunc(got, want, same) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		x    []float64
		want float64
	}{{nil, 0}, {[]float64{0.6, 4, 1}, 1}, {[]float64{3, 1}, 2}} {
		if m := median(tc.x); m != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.x, m, tc.want)
		}
	}
}

// TestSpeedTableSkipped checks that a test a backend refused shows a dash
// and, under the table, why.
func TestSpeedTableSkipped(t *testing.T) {
	var b strings.Builder
	rows := []speedRow{{test: "a", ours: 2, limit: 3}, {test: "b", skipped: "int8 keys are refused"}}
	if err := writeSpeedTable(&b, rows, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || strings.Fields(lines[2])[1] != "–" || lines[3] != "b: not run: int8 keys are refused" {
		t.Errorf("got:\n%s", b.String())
	}
}

// TestParseLlamaBench reads llama-bench's CSV output, captured from a run
// with -p 128 -n 64 -r 2, and refuses malformed output.
func TestParseLlamaBench(t *testing.T) {
	real, err := os.ReadFile(filepath.Join("testdata", "llama-bench.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		want     map[string]float64
		err      string
	}{
		{"captured", string(real), map[string]float64{"prefill, 128-token prompt": 34366.546064, "decode, 1 sequence, 64 tokens": 2156.713278}, ""},
		{"no rows", "n_prompt,n_gen,avg_ts\n", nil, "no results"},
		{"empty", "", nil, "no results"},
		{"no avg_ts", "n_prompt,n_gen\n128,0\n", nil, "no avg_ts column"},
		{"bad number", "n_prompt,n_gen,avg_ts\n128,0,fast\n", nil, "bad numbers"},
		{"ragged", "n_prompt,n_gen,avg_ts\n128,0\n", nil, "CSV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLlamaBench(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestParseBatchedBench reads llama-batched-bench's JSONL output, captured
// from a run with -npp 128 -ntg 32 -npl 1,4,8,1 (bench speed's extra last
// test), and refuses malformed output.
func TestParseBatchedBench(t *testing.T) {
	real, err := os.ReadFile(filepath.Join("testdata", "llama-batched-bench.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in string
		want     map[string]float64
		err      string
	}{
		{"captured", string(real), map[string]float64{
			"decode, 1 sequence after 128":              3013.750244, // the first of the two 1-sequence tests
			"decode, 4 sequences after 128 (aggregate)": 8455.541992,
			"decode, 8 sequences after 128 (aggregate)": 5916.886230,
		}, ""},
		{"log lines around", "main: n_kv_max = 4096\n" + `{"pp": 128, "tg": 32, "pl": 2, "speed_tg": 7.5}` + "\nllama_perf: done\n",
			map[string]float64{"decode, 2 sequences after 128 (aggregate)": 7.5}, ""},
		{"nothing", "main: n_kv_max = 4096\n", nil, "no results"},
		{"bad json", `{"pp": 128, "tg": 32,` + "\n", nil, "JSON line"},
		{"no speed", `{"pp": 128, "tg": 32, "pl": 1}` + "\n", nil, "lacks pp, tg, pl or speed_tg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBatchedBench(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s: %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

// TestBenchSample runs bench sample on a small extended vocabulary and
// checks its table: the four rows, each with tokens and positive times,
// and a compile time where each request compiles its constraint.
func TestBenchSample(t *testing.T) {
	vocab := filepath.Join(testshared.Dir(), "testdata", "tokenizer", "ggml-vocab-gpt-2.gguf")
	if _, err := os.Stat(vocab); err != nil {
		t.Skipf("no GPT-2 vocabulary: %v", err)
	}
	code, out, stderr := run(t, "bench", "sample", "-m", vocab, "--vocab", "60000", "-r", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "vocabulary: 60000 tokens") || !strings.Contains(out, "decode step of Llama 3.2 1B Q4_K_M") {
		t.Fatalf("no vocabulary or decode-step line:\n%s", out)
	}
	for _, row := range []struct {
		name     string
		compiles bool
	}{{"none", false}, {"JSON object", true}, {"JSON schema, new to the process", true}, {"JSON schema, seen before", false}} {
		i := strings.Index(out, row.name+"  ")
		if i < 0 {
			t.Fatalf("no row %q:\n%s", row.name, out)
		}
		line, _, _ := strings.Cut(out[i+len(row.name):], "\n")
		f := strings.Fields(line)
		if len(f) != 10 || f[0] == "0" || f[1] == "0" {
			t.Errorf("row %q: want tokens, 6 times, 2 shares and a compile time, got %q", row.name, line)
			continue
		}
		if compiled := f[9] != "-"; compiled != row.compiles {
			t.Errorf("row %q: compile time %q, want one: %v", row.name, f[9], row.compiles)
		}
	}
}

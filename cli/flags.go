package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"kvscope/engine"
	"kvscope/engine/kvcache"
	"kvscope/engine/kvstore"
	"kvscope/engine/sample"
)

// Upper bounds of the count flags. Each is far above any real use and far
// below what would overflow the int64 arithmetic it feeds (a count times a
// block's bytes, say).
const (
	maxTokens   = 1 << 24 // -n, -c: model.ReadConfig's largest context
	maxParallel = 1024    // --parallel
	maxPrompts  = 1024    // repeated -p
	maxTopK     = 1 << 24 // --top-k: no vocabulary is larger
	maxBudget   = 1 << 40 // --cache-budget: 1 TiB
	maxTextSize = 1 << 28 // -f: 256 MiB of text
)

// usageError is a bad command line: Main prints it with a hint and exits 2.
type usageError struct {
	cmd string
	err error
}

func (u *usageError) Error() string {
	return fmt.Sprintf("%v (see 'kvscope %s -h')", u.err, u.cmd)
}

func (u *usageError) Unwrap() error { return u.err }

// flagSet is a command's flag set: it reports errors as one usageError
// instead of printing them with the usage, and prints the usage on -h.
type flagSet struct {
	*flag.FlagSet
	name, synopsis string
	stderr         io.Writer
}

// newFlags returns the flag set of command name, whose synopsis (its
// arguments) the usage shows.
func newFlags(name, synopsis string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, name: name, synopsis: synopsis, stderr: stderr}
}

// usage prints the synopsis and the flags.
func (f *flagSet) usage() {
	fmt.Fprintf(f.stderr, "usage: kvscope %s %s\n", f.name, f.synopsis)
	f.SetOutput(f.stderr)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// usageErr wraps err as a usage error of this command.
func (f *flagSet) usageErr(format string, a ...any) error {
	return &usageError{cmd: f.name, err: fmt.Errorf(format, a...)}
}

// parse parses args, which must hold only flags.
func (f *flagSet) parse(args []string) error {
	if err := f.parseArgs(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return f.usageErr("unexpected argument %q: every input goes with a flag, before any other argument", f.Arg(0))
	}
	return nil
}

// parseArgs parses args, leaving the arguments after the flags in Args.
func (f *flagSet) parseArgs(args []string) error {
	err := f.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		f.usage()
		return err
	}
	if err != nil {
		return &usageError{cmd: f.name, err: err}
	}
	return nil
}

// integer is an integer flag's value, refused outside lo..hi.
type integer[T int | int64] struct {
	p      *T
	lo, hi T
}

func (v *integer[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return strconv.FormatInt(int64(*v.p), 10)
}

func (v *integer[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < int64(v.lo) || n > int64(v.hi) {
		return fmt.Errorf("want an integer from %d to %d", v.lo, v.hi)
	}
	*v.p = T(n)
	return nil
}

// intVar defines an integer flag stored in p (which holds its default),
// limited to lo..hi; the usage gets the range appended.
func intVar[T int | int64](f *flagSet, p *T, name string, lo, hi T, usage string) {
	f.Var(&integer[T]{p: p, lo: lo, hi: hi}, name, fmt.Sprintf("%s; %d to %d", usage, lo, hi))
}

// intFlag is intVar with a new variable set to def.
func intFlag(f *flagSet, name string, def, lo, hi int, usage string) *int {
	p := new(int)
	*p = def
	intVar(f, p, name, lo, hi, usage)
	return p
}

// real is a float flag's value, refused outside its range (and NaN or
// infinite).
type real struct {
	p      *float64
	lo, hi float64
	loOpen bool // lo itself is refused
}

func (v *real) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v *real) Set(s string) error {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || !(x >= v.lo && x <= v.hi) || (v.loOpen && x == v.lo) {
		return fmt.Errorf("want a number %s", v.rangeText())
	}
	*v.p = x
	return nil
}

func (v *real) rangeText() string {
	if v.loOpen {
		return fmt.Sprintf("above %g, at most %g", v.lo, v.hi)
	}
	return fmt.Sprintf("from %g to %g", v.lo, v.hi)
}

// floatFlag defines a float flag limited to lo..hi (above lo when loOpen).
func floatFlag(f *flagSet, name string, def, lo, hi float64, loOpen bool, usage string) *float64 {
	v := &real{p: new(float64), lo: lo, hi: hi, loOpen: loOpen}
	*v.p = def
	f.Var(v, name, usage+"; "+v.rangeText())
	return v.p
}

// size is a byte size flag: a number with an optional unit (512MiB, 2GB),
// more than 0 and at most maxBudget, or "auto" (0).
type size struct{ p *int64 }

func (v *size) String() string {
	if v == nil || v.p == nil || *v.p == 0 {
		return "auto"
	}
	return humanize.IBytes(uint64(*v.p))
}

func (v *size) Set(s string) error {
	if s == "auto" {
		*v.p = 0
		return nil
	}
	b, err := humanize.ParseBytes(s)
	if err != nil || strings.TrimSpace(s) != s || b == 0 || b > maxBudget {
		return fmt.Errorf("want a size such as 512MiB or 2GB, above 0 and at most %s, or auto", humanize.IBytes(maxBudget))
	}
	*v.p = int64(b)
	return nil
}

// choice defines a flag whose value parse turns into *p (which holds the
// default, named def in the usage).
func choice[T any](f *flagSet, p *T, name, def, usage string, parse func(string) (T, error)) {
	f.Func(name, fmt.Sprintf("%s (default %s)", usage, def), func(s string) error {
		v, err := parse(s)
		if err != nil {
			return err
		}
		*p = v
		return nil
	})
}

// addCacheFlags defines the K/V cache flags shared by run and perplexity,
// which write into cfg (holding the defaults).
func addCacheFlags(f *flagSet, cfg *engine.Config) {
	c := &cfg.Cache
	intVar(f, &c.BlockSize, "block-size", 1, kvstore.MaxBlockSize, "K/V cache block size in tokens")
	f.Var(&size{&c.Budget}, "cache-budget", "K/V cache memory, with units (e.g. 64MiB), or auto")
	choice(f, &c.K, "cache-k", c.K.String(), "K cache precision: "+precisionNames(), kvstore.ParsePrecision)
	choice(f, &c.V, "cache-v", c.V.String(), "V cache precision: "+precisionNames(), kvstore.ParsePrecision)
	choice(f, &c.Allocator, "allocator", "paged", "cache allocator: paged or contiguous", kvcache.ParseAllocator)
	choice(f, &c.Eviction, "eviction", "lru", "eviction policy for cached blocks: lru, lfu or fifo", kvcache.ParseEvictionPolicy)
	choice(f, &c.Preempt, "preempt", "recompute", "preemption mode when the cache is full: recompute or swap", kvcache.ParsePreemptMode)
	choice(f, &c.Overflow, "overflow", "stop", "at the context limit: stop, rolling or truncate", kvcache.ParseOverflowPolicy)
	intVar(f, &cfg.Context, "c", 0, maxTokens, "context length in tokens (0: the model's)")
}

func precisionNames() string {
	var names []string
	for _, p := range kvstore.Precisions() {
		names = append(names, p.String())
	}
	return strings.Join(names, ", ")
}

// samplingFlags defines the sampling flags shared by run and chat
// (--temp, --seed, --top-k, --top-p, --min-p, --repeat-penalty) and
// returns a function that, after parsing, gives the checked parameters (a
// seed of -1 draws one at random).
func samplingFlags(fs *flagSet) func() (sample.Params, error) {
	sp := sample.DefaultParams()
	temp := floatFlag(fs, "temp", float64(sp.Temperature), 0, 100, false, "temperature (0: greedy)")
	seed := int64(-1)
	intVar(fs, &seed, "seed", -1, math.MaxInt64, "random seed (-1: random)")
	intVar(fs, &sp.TopK, "top-k", 0, maxTopK, "top-k sampling (0: off)")
	topP := floatFlag(fs, "top-p", float64(sp.TopP), 0, 1, true, "top-p sampling (1: off)")
	minP := floatFlag(fs, "min-p", float64(sp.MinP), 0, 1, false, "min-p sampling (0: off)")
	rep := floatFlag(fs, "repeat-penalty", float64(sp.RepeatPenalty), 0, 100, true, "repetition penalty (1: off)")
	return func() (sample.Params, error) {
		sp.Temperature, sp.TopP, sp.MinP, sp.RepeatPenalty = float32(*temp), float32(*topP), float32(*minP), float32(*rep)
		sp.Seed = uint64(seed)
		if seed < 0 {
			sp.Seed = rand.Uint64()
		}
		return sp, sp.Validate()
	}
}

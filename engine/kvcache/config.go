package kvcache

import (
	"errors"
	"fmt"
	"strings"
)

// SeqID names a sequence (a request, or one sample of it) in the manager.
type SeqID int64

// Allocator chooses how sequences get memory.
type Allocator uint8

// The allocator modes.
const (
	// Paged gives blocks on demand, anywhere in the pool (PagedAttention).
	Paged Allocator = iota
	// Contiguous reserves each sequence's maximum length up front as one
	// run of adjacent blocks, as systems did before PagedAttention. It has
	// no prefix sharing; forks copy. It exists for comparison.
	Contiguous
)

// String returns "paged" or "contiguous".
func (a Allocator) String() string {
	switch a {
	case Paged:
		return "paged"
	case Contiguous:
		return "contiguous"
	}
	return fmt.Sprintf("Allocator(%d)", a)
}

// ParseAllocator parses "paged" or "contiguous" (any case).
func ParseAllocator(s string) (Allocator, error) {
	switch strings.ToLower(s) {
	case "paged":
		return Paged, nil
	case "contiguous":
		return Contiguous, nil
	}
	return 0, fmt.Errorf("kvcache: unknown allocator %q (want paged or contiguous)", s)
}

// PreemptMode says how a preempted sequence gives back its blocks.
type PreemptMode uint8

// The preemption modes.
const (
	// Recompute frees the blocks; the caller requeues the sequence's tokens
	// and computes them again later (cheaply where the prefix cache still
	// holds them).
	Recompute PreemptMode = iota
	// Swap copies the blocks' bytes to the bounded host pool and frees the
	// device blocks; SwapIn brings them back.
	Swap
)

// String returns "recompute" or "swap".
func (m PreemptMode) String() string {
	switch m {
	case Recompute:
		return "recompute"
	case Swap:
		return "swap"
	}
	return fmt.Sprintf("PreemptMode(%d)", m)
}

// ParsePreemptMode parses "recompute" or "swap" (any case).
func ParsePreemptMode(s string) (PreemptMode, error) {
	switch strings.ToLower(s) {
	case "recompute":
		return Recompute, nil
	case "swap":
		return Swap, nil
	}
	return 0, fmt.Errorf("kvcache: unknown preemption mode %q (want recompute or swap)", s)
}

// OverflowPolicy says what happens when a sequence reaches its context limit.
type OverflowPolicy uint8

// The overflow policies. See Overflow for what the engine must do after each.
const (
	// Stop refuses the tokens with a *ContextLimitError.
	Stop OverflowPolicy = iota
	// RollingWindow keeps the attention sinks (the first Sinks tokens,
	// rounded up to whole blocks) and the most recent tokens, dropping whole
	// blocks in between (StreamingLLM). Kept keys after the gap must be
	// re-rotated; the sequence's later blocks leave the prefix cache.
	RollingWindow
	// TruncateMiddle keeps the first Sinks tokens and the most recent ones,
	// half the limit in all, and recomputes every kept token after the
	// head's whole blocks: exact for the shortened text, but costly.
	TruncateMiddle
)

// String returns "stop", "rolling" or "truncate".
func (o OverflowPolicy) String() string {
	switch o {
	case Stop:
		return "stop"
	case RollingWindow:
		return "rolling"
	case TruncateMiddle:
		return "truncate"
	}
	return fmt.Sprintf("OverflowPolicy(%d)", o)
}

// ParseOverflowPolicy parses "stop", "rolling" or "truncate" (any case).
func ParseOverflowPolicy(s string) (OverflowPolicy, error) {
	switch strings.ToLower(s) {
	case "stop":
		return Stop, nil
	case "rolling", "rolling-window", "window":
		return RollingWindow, nil
	case "truncate", "truncate-middle":
		return TruncateMiddle, nil
	}
	return 0, fmt.Errorf("kvcache: unknown overflow policy %q (want stop, rolling or truncate)", s)
}

// Config sizes and tunes a Manager.
type Config struct {
	BlockSize  int   // tokens per block, 1 to 256
	BlockBytes int   // bytes one block takes across all layers, K+V with scales (kvstore.BlockBytes)
	Budget     int64 // device bytes for blocks; the pool has Budget/BlockBytes blocks
	HostBudget int64 // bytes of the host swap pool; 0 makes every swap fall back to recompute

	Allocator Allocator      // Paged (default) or Contiguous
	Eviction  EvictionPolicy // LRU (default), LFU or FIFO

	KPrecision, VPrecision string // shown in snapshots, such as "f16" or "int4"

	MaxLen   int            // default context limit per sequence in tokens; 0: none (paged only)
	Overflow OverflowPolicy // default overflow policy
	Sinks    int            // default attention-sink tokens; 0 means 4

	EventBuffer int // events kept in the ring; 0 means 4096

	// FirstStep is the step count to start from, so that a pool rebuilt
	// with new settings continues its predecessor's count.
	FirstStep int64
}

// SeqOptions overrides the Config defaults for one sequence.
type SeqOptions struct {
	MaxLen   int             // context limit in tokens; 0: Config.MaxLen. Contiguous mode reserves this much.
	Overflow *OverflowPolicy // nil: Config.Overflow
	Sinks    int             // attention-sink (kept head) tokens; 0: Config.Sinks
}

// MaxBlockSize is the largest block size in tokens.
const MaxBlockSize = 256

// NumBlocksFor returns how many blocks of blockBytes fit in budget bytes.
func NumBlocksFor(budget int64, blockBytes int) (int, error) {
	if blockBytes <= 0 {
		return 0, fmt.Errorf("kvcache: block bytes must be positive, got %d", blockBytes)
	}
	if budget < int64(blockBytes) {
		return 0, fmt.Errorf("kvcache: cache budget of %d bytes holds no block of %d bytes", budget, blockBytes)
	}
	n := budget / int64(blockBytes)
	if n > 1<<31-1 {
		return 0, fmt.Errorf("kvcache: cache budget of %d bytes makes %d blocks, more than 2^31-1", budget, n)
	}
	return int(n), nil
}

func (c *Config) validate() (numBlocks int, err error) {
	if c.BlockSize < 1 || c.BlockSize > MaxBlockSize {
		return 0, fmt.Errorf("kvcache: block size must be 1 to %d tokens, got %d", MaxBlockSize, c.BlockSize)
	}
	if c.Allocator > Contiguous {
		return 0, fmt.Errorf("kvcache: unknown allocator %d", c.Allocator)
	}
	if c.Eviction > FIFO {
		return 0, fmt.Errorf("kvcache: unknown eviction policy %d", c.Eviction)
	}
	if c.Overflow > TruncateMiddle {
		return 0, fmt.Errorf("kvcache: unknown overflow policy %d", c.Overflow)
	}
	if c.MaxLen < 0 || c.Sinks < 0 || c.HostBudget < 0 || c.EventBuffer < 0 {
		return 0, fmt.Errorf("kvcache: negative setting in config (max len %d, sinks %d, host budget %d, event buffer %d)",
			c.MaxLen, c.Sinks, c.HostBudget, c.EventBuffer)
	}
	return NumBlocksFor(c.Budget, c.BlockBytes)
}

// ErrNoSpace is matched (errors.Is) by every *NoSpaceError.
var ErrNoSpace = errors.New("kvcache: no space")

// ErrContextFull is matched (errors.Is) by every *ContextLimitError.
var ErrContextFull = errors.New("kvcache: context full")

// ErrNoStorage is returned when an operation must move K/V bytes (copy on
// write, swap) but the manager was made without a Storage.
var ErrNoStorage = errors.New("kvcache: this operation moves K/V data and the manager has no Storage")

// NoSpaceError says an operation needs more blocks than the pool can give
// now. Nothing was changed; the caller may preempt a sequence and retry.
type NoSpaceError struct {
	Op        string // "allocate", "append", "fork", "swap in"
	Seq       SeqID  // the sequence that asked
	Need      int    // blocks needed
	Available int    // blocks free or evictable
	// LargestRun is the longest run of free blocks (contiguous mode), when
	// that, not the total, is what fell short: external fragmentation.
	LargestRun int
}

// Error says what was needed and what the pool had.
func (e *NoSpaceError) Error() string {
	if e.Available >= e.Need {
		return fmt.Sprintf("kvcache: no space to %s sequence %d: it needs %d adjacent blocks, %d are free but the longest free run is %d",
			e.Op, e.Seq, e.Need, e.Available, e.LargestRun)
	}
	return fmt.Sprintf("kvcache: no space to %s sequence %d: it needs %d blocks, %d are free or evictable",
		e.Op, e.Seq, e.Need, e.Available)
}

// Is makes errors.Is(err, ErrNoSpace) true.
func (e *NoSpaceError) Is(target error) bool { return target == ErrNoSpace }

// ContextLimitError says a sequence cannot take more tokens: its overflow
// policy is Stop, or the policy cannot make room for so many tokens at once.
type ContextLimitError struct {
	Seq    SeqID          // the sequence that is full
	Limit  int            // the sequence's context limit in tokens
	Len    int            // tokens it holds
	Adding int            // tokens asked for
	Policy OverflowPolicy // its overflow policy
	Detail string         // why the policy could not help, when it was not Stop
}

// Error names the sequence, its limit and the policy.
func (e *ContextLimitError) Error() string {
	s := fmt.Sprintf("kvcache: sequence %d reached its context limit of %d tokens (holds %d, adding %d, overflow policy %s)",
		e.Seq, e.Limit, e.Len, e.Adding, e.Policy)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes errors.Is(err, ErrContextFull) true.
func (e *ContextLimitError) Is(target error) bool { return target == ErrContextFull }

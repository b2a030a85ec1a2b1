package kvcache

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func policy(p OverflowPolicy) *OverflowPolicy { return &p }

func TestOverflowStop(t *testing.T) {
	m, st := newTestManager(t, Config{BlockSize: 4, MaxLen: 16}, 8)
	mustAllocate(t, m, st, 1, seqTokens(1, 16), SeqOptions{})
	_, err := m.Append(1, []int32{99})
	var ce *ContextLimitError
	if !errors.As(err, &ce) || !errors.Is(err, ErrContextFull) || ce.Limit != 16 || ce.Len != 16 {
		t.Fatalf("append past the limit: %v", err)
	}
	if want := "sequence 1 reached its context limit of 16 tokens (holds 16, adding 1, overflow policy stop)"; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q, want it to contain %q", err, want)
	}
	if _, err := m.Allocate(2, seqTokens(1, 17), SeqOptions{}); !errors.Is(err, ErrContextFull) {
		t.Errorf("prompt past the limit: %v", err)
	}
	mustCheck(t, m, st)
}

func TestOverflowRollingWindow(t *testing.T) {
	tests := []struct {
		alloc Allocator
		fork  bool // share the blocks with a sibling first
	}{
		{Paged, false},
		{Paged, true},
		{Contiguous, false},
	}
	for _, tt := range tests {
		name := tt.alloc.String()
		if tt.fork {
			name += "/shared"
		}
		t.Run(name, func(t *testing.T) {
			m, st := newTestManager(t, Config{BlockSize: 4, MaxLen: 16, Overflow: RollingWindow, Allocator: tt.alloc}, 12)
			toks := seqTokens(1, 16)
			mustAllocate(t, m, st, 1, toks[:12], SeqOptions{})
			mustAppend(t, m, st, 1, toks[12:]) // exactly at the limit: no overflow
			if tt.fork {
				if err := m.Fork(1, 2); err != nil {
					t.Fatal(err)
				}
			}
			r := mustAppend(t, m, st, 1, []int32{99})
			ov := r.Overflow
			want := Overflow{Policy: RollingWindow, DroppedFrom: 4, DroppedTo: 8, Shift: 4, RotateFrom: 4, RotateTo: 12}
			if ov == nil {
				t.Fatal("no overflow report")
			}
			got := *ov
			got.Copied = 0
			if got != want {
				t.Fatalf("overflow %+v, want %+v", got, want)
			}
			wantCopied := 0
			switch {
			case tt.fork:
				wantCopied = 2 // blocks 2 and 3, shared with the sibling, are kept past the gap
			case tt.alloc == Contiguous:
				wantCopied = 2 // blocks 2 and 3 move down one
			}
			if ov.Copied != wantCopied {
				t.Errorf("copied %d blocks, want %d", ov.Copied, wantCopied)
			}
			if wantToks := slices.Concat(toks[:4], toks[8:], []int32{99}); !slices.Equal(m.Tokens(1), wantToks) {
				t.Errorf("tokens %v, want %v", m.Tokens(1), wantToks)
			}
			if r.Start != 12 || m.Len(1) != 13 {
				t.Errorf("start %d, len %d; want 12 and 13", r.Start, m.Len(1))
			}
			snap := m.Snapshot()
			if !snap.Seqs[0].Private {
				t.Error("sequence not marked private after the shift")
			}
			if tt.alloc == Paged {
				for i, b := range m.BlockTable(1) {
					if hashed := snap.Blocks[b].Hashed; hashed != (i == 0) {
						t.Errorf("block %d (entry %d) hashed %v: only the sink block may stay cached", b, i, hashed)
					}
				}
			}
			mustCheck(t, m, st) // keys re-positioned per the contract; a sibling untouched
			for range 9 {       // keep rolling
				mustAppend(t, m, st, 1, []int32{77})
				mustCheck(t, m, st)
			}
			if m.Len(1) > 16 || m.Metrics().Overflows < 3 {
				t.Errorf("len %d, %d overflows", m.Len(1), m.Metrics().Overflows)
			}
			if _, err := m.Append(1, seqTokens(5, 13)); !errors.Is(err, ErrContextFull) || !strings.Contains(err.Error(), "drops whole blocks") {
				t.Errorf("appending more than the window at once: %v", err)
			}
		})
	}
}

func TestOverflowTruncateMiddle(t *testing.T) {
	for _, alloc := range []Allocator{Paged, Contiguous} {
		t.Run(alloc.String(), func(t *testing.T) {
			m, st := newTestManager(t, Config{BlockSize: 4, MaxLen: 16, Overflow: TruncateMiddle, Allocator: alloc}, 12)
			toks := seqTokens(1, 16)
			mustAllocate(t, m, st, 1, toks, SeqOptions{})
			r := mustAppend(t, m, st, 1, []int32{99})
			want := Overflow{Policy: TruncateMiddle, DroppedFrom: 4, DroppedTo: 13}
			if r.Overflow == nil || *r.Overflow != want {
				t.Fatalf("overflow %+v, want %+v", r.Overflow, want)
			}
			if wantToks := slices.Concat(toks[:4], toks[13:], []int32{99}); !slices.Equal(m.Tokens(1), wantToks) {
				t.Errorf("tokens %v, want %v", m.Tokens(1), wantToks)
			}
			if r.Start != 4 {
				t.Errorf("recompute from %d, want 4 (the head's whole block stays)", r.Start)
			}
			mustCheck(t, m, st)
		})
	}
	t.Run("prompt", func(t *testing.T) {
		m, st := newTestManager(t, Config{BlockSize: 4, MaxLen: 16}, 12)
		toks := seqTokens(1, 40)
		r := mustAllocate(t, m, st, 1, toks, SeqOptions{Overflow: policy(TruncateMiddle)})
		if r.Overflow == nil || r.Overflow.DroppedFrom != 4 || r.Overflow.DroppedTo != 36 {
			t.Fatalf("overflow %+v, want tokens 4 to 35 dropped", r.Overflow)
		}
		if want := slices.Concat(toks[:4], toks[36:]); !slices.Equal(m.Tokens(1), want) {
			t.Errorf("tokens %v, want %v", m.Tokens(1), want)
		}
		mustCheck(t, m, st)
	})
	t.Run("limit too small", func(t *testing.T) {
		m, _ := newTestManager(t, Config{BlockSize: 4}, 12)
		_, err := m.Allocate(1, []int32{1}, SeqOptions{MaxLen: 8, Overflow: policy(RollingWindow)})
		if err == nil || !strings.Contains(err.Error(), "needs a context limit of at least 12 tokens, got 8") {
			t.Errorf("rolling window with a tiny limit: %v", err)
		}
	})
}

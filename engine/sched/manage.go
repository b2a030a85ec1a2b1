package sched

import "kvscope/engine/kvcache"

// The scheduler is the one driver of its Manager: besides its plans, the
// calls below are how its caller changes the cache, so that every change
// to the block tables and the pool goes through one owner. The caller only
// reads the Manager (snapshots, metrics, events, block tables) and, when a
// reconfiguration replaces the pool, hands over a new one (SetManager).

// Commit records that q's tokens before end have their K/V written, after
// a forward pass: their full blocks may enter the prefix cache.
func (s *Scheduler) Commit(q *Seq, end int) error { return s.m.Commit(q.ID, end) }

// Fork starts child as a copy-on-write fork of parent (parallel samples
// of one prompt) and runs it; kvcache.ErrNoSpace means no block was free
// for the fork's own last block.
func (s *Scheduler) Fork(parent, child *Seq) error {
	if err := s.m.Fork(parent.ID, child.ID); err != nil {
		return err
	}
	s.AddRunning(child)
	return nil
}

// EndStep ends a step on the cache's clock (block ages, eviction order).
func (s *Scheduler) EndStep() { s.m.Tick() }

// SetEviction changes the prefix cache's eviction policy.
func (s *Scheduler) SetEviction(p kvcache.EvictionPolicy) error { return s.m.SetEviction(p) }

// Package sched decides, step by step, which sequences run and how many of
// their tokens: iteration-level scheduling (Orca, vLLM) over a kvcache
// Manager, with decodes first, chunked prefill under a per-step token
// budget, admission by free blocks with a watermark, FCFS or priority order,
// and preemption by recompute or swap when the pool runs out.
//
// The scheduler only plans and keeps the cache's block tables in step with
// its plan; it never runs the model. It is the Manager's one driver: its
// caller (package engine) runs the planned rows through the model,
// samples, appends sampled tokens to the sequences, and asks the scheduler
// to commit the computed tokens, fork parallel samples and end the step
// (manage.go); it only reads the Manager itself.
package sched

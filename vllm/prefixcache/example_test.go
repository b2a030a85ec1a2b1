package prefixcache_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"kvscope/vllm/kvsub"
	"kvscope/vllm/prefixcache"
)

// Watching two vLLM data-parallel ranks started with endpoint tcp://*:5557
// and replay_endpoint tcp://*:5567 (vLLM adds rank r to both ports), printing the cluster's figures every second. (Compiled, not run: it
// needs live vLLM servers.)
func ExampleCluster_Apply() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srcs := []kvsub.Source{
		{Name: "rank-0", Endpoint: "tcp://vllm-host:5557", Replay: "tcp://vllm-host:5567", Topic: "kv"},
		{Name: "rank-1", Endpoint: "tcp://vllm-host:5558", Replay: "tcp://vllm-host:5568", Topic: "kv"},
	}
	updates := make(chan kvsub.Update, 1024)
	go func() {
		if err := kvsub.RunAll(ctx, srcs, updates); err != nil && ctx.Err() == nil {
			log.Print(err)
		}
	}()
	cluster := prefixcache.NewCluster(prefixcache.Options{})
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			cluster.Apply(u)
			if u.Kind == kvsub.KindMalformed || u.Kind == kvsub.KindError {
				log.Printf("%s: %v", u.Source, u.Err)
			}
		case <-tick.C:
			total, distinct := cluster.Total()
			fmt.Printf("cached blocks: %d (%d distinct), stored %d, removed %d\n", total.Blocks, distinct, total.Stored, total.Removed)
			for _, name := range cluster.Sources() {
				tr := cluster.Source(name).Tree()
				fmt.Printf("%s: %d blocks in %d chains\n", name, tr.Blocks, len(tr.Roots))
			}
		}
	}
}

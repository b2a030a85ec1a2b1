package remote

import "kvscope/vllm/vllmtest"

// stored is a BlockStored event whose tokens are word pieces of the demo
// model's vocabulary (past its byte tokens), so that a tokenizer decodes
// them to words.
func stored(hashes []uint64, parent any, blockSize int) any {
	return vllmtest.Stored(hashes, parent, blockSize, func(h uint64, j int) int {
		return 260 + int(h*uint64(blockSize)+uint64(j))%250
	})
}

package kvsub

import "testing"

// Exported for the external tests (end_to_end_test.go), which use
// prefixcache, itself an importer of kvsub.

type TestPub struct{ p *testPub }

func NewTestPub(t testing.TB, topic string, maxBuf int) TestPub {
	return TestPub{newTestPub(t, topic, maxBuf)}
}

func (tp TestPub) Endpoints() (pub, replay string)   { return tp.p.pubEP, tp.p.replayEP }
func (tp TestPub) Publish(payload []byte, send bool) { tp.p.publish(payload, send) }
func (tp TestPub) WaitSubscribed(prefix string)      { tp.p.waitSubscribed(prefix) }
func (tp TestPub) ReplayStarts() []int64             { return tp.p.replayStarts() }

var Pack = pack

func StoredArray(hashes []any, parent any, tokens []any, blockSize int) any {
	return storedArray(hashes, parent, tokens, blockSize)
}
func StoredMap(hashes []any, parent any, tokens []any, blockSize int) any {
	return storedMap(hashes, parent, tokens, blockSize)
}
func RemovedArray(hashes []any) any            { return removedArray(hashes) }
func RemovedMap(hashes []any) any              { return removedMap(hashes) }
func BatchArray(ts float64, events ...any) any { return batchArray(ts, events...) }
func BatchMap(ts float64, events ...any) any   { return batchMap(ts, events...) }

// Package kvsub subscribes to vLLM's KV-cache event publishers over ZeroMQ
// (pure Go, github.com/go-zeromq/zmq4), replaying from sequence 0 on connect,
// filling sequence gaps from the replay socket and delivering each source's
// decoded batches in order.
//
// One [Source] is one publisher (one vLLM instance or data-parallel rank):
// a SUB socket on its PUB endpoint and, where it has one, a DEALER on its
// ROUTER replay endpoint. On start the subscriber asks the replay socket for
// everything from sequence 0 (a DEALER sends an empty delimiter frame and the
// 8-byte big-endian start sequence; the ROUTER sees [identity, "", start])
// and delivers the buffered batches, up to the end marker (sequence -1),
// then follows the live stream. A live sequence number past the next
// expected one is a gap: the missing batches are asked for from the replay
// socket, and what the publisher no longer buffers is reported as lost. A
// sequence number that goes back is a publisher restart, reported as a
// reset; so is a dropped connection after which the replay socket's batch
// under the last number seen is not the one delivered (a new process on
// the same port). A dropped connection is redialed by the subscriber
// itself (not by zmq4) until the context ends. Malformed messages are
// reported and skipped, never fatal.
//
// Without a replay endpoint (for example a bound SUB that many publishers
// connect to, as llm-d's topics kv@<pod>@<model> allow), sequences are
// tracked per topic and gaps are reported as lost.
package kvsub

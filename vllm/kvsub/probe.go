package kvsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// probe checks that a tcp endpoint speaks ZMTP before zmq4 dials it:
// zmq4's handshake waits for the peer's greeting without a deadline, so
// an endpoint that accepts and stays silent (an HTTP port, say) would hang
// the dial for good. A ZMTP peer sends its 10-byte signature (0xff, 8
// bytes, 0x7f) as soon as it accepts. A refused connection is not probe's
// business: zmq4's dial retries it.
func probe(ctx context.Context, ep string, timeout time.Duration) error {
	addr, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	var sig [10]byte
	_, err = io.ReadFull(c, sig[:])
	switch {
	case err == nil && (sig[0] != 0xff || sig[9] != 0x7f):
		return fmt.Errorf("the peer at %s is not a ZeroMQ socket (it sent %q)", addr, sig[:])
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the peer at %s closed the connection before a ZeroMQ greeting", addr)
	case err != nil && ctx.Err() != nil:
		if parent := context.Cause(ctx); errors.Is(parent, context.Canceled) {
			return parent
		}
		return fmt.Errorf("the peer at %s sent no ZeroMQ greeting in %v (is it the right port?)", addr, timeout)
	case err != nil:
		return fmt.Errorf("the peer at %s: %w", addr, err)
	}
	return nil
}

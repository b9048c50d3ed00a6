package api

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// One write per response.
//
// net/http buffers a connection's output in a fixed 4 KB bufio.Writer: an
// answer whose headers and body exceed that (a k=100 list is about 6 KB)
// leaves in two write syscalls, and on loopback each write is about a sixth
// of the request's server CPU (BENCHMARKS.md, "Serving"). Serve wraps every accepted connection in a
// coalescingConn; serveRendered, knowing the whole answer, corks it, writes
// headers and body, flushes them through net/http into the cork, and
// uncorks: the kernel sees one write. Nothing else corks, so every other
// write goes straight through as before.

// coalescingConn is a net.Conn whose writes can be held back and sent as one.
// Cork, Write and uncork run on the connection's serving goroutine (HTTP/1:
// net/http writes a connection from the goroutine that runs its handler),
// so the buffer needs no lock. The buffer is borrowed from a pool for the
// length of one answer: an idle connection holds none.
type coalescingConn struct {
	net.Conn
	buf *[]byte // non-nil while corked
	err error   // a failed uncork, returned by every later Write
}

// corkBufs holds the buffers of corked answers. A buffer larger than maxCork
// (an answer of a few hundred KB) is not kept.
var corkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

const maxCork = 256 << 10

func (c *coalescingConn) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.buf != nil {
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *coalescingConn) cork() {
	if c.buf == nil {
		c.buf = corkBufs.Get().(*[]byte)
	}
}

// uncork sends what was held in one write. A failed write closes the
// connection (as net/http does after a failed write) and is returned by
// every later Write.
func (c *coalescingConn) uncork() {
	b := c.buf
	if b == nil {
		return
	}
	c.buf = nil
	if len(*b) > 0 && c.err == nil {
		if _, err := c.Conn.Write(*b); err != nil {
			c.err = err
			c.Conn.Close()
		}
	}
	if cap(*b) <= maxCork {
		*b = (*b)[:0]
		corkBufs.Put(b)
	}
}

// CloseWrite keeps net/http's graceful close (half-close, then drain) on
// TCP connections.
func (c *coalescingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// coalescingListener wraps accepted connections in coalescingConn.
type coalescingListener struct{ net.Listener }

func (l coalescingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &coalescingConn{Conn: c}, nil
}

type connKey struct{}

// connContext is http.Server.ConnContext: it makes the connection reachable
// from its requests.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*coalescingConn); ok {
		return context.WithValue(ctx, connKey{}, cc)
	}
	return ctx
}

// corkable returns the request's connection when its response can be
// coalesced: served by Serve, over HTTP/1.
func corkable(r *http.Request) *coalescingConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	cc, _ := r.Context().Value(connKey{}).(*coalescingConn)
	return cc
}

// smallBody is a body that leaves with its headers in net/http's 4 KB
// buffer anyway: no cork needed.
const smallBody = 3 << 10

// writeCoalesced writes body (headers already set, status 200 not yet
// written) so that headers and body leave in one write when the connection
// allows it.
func writeCoalesced(w http.ResponseWriter, r *http.Request, body []byte) {
	var cc *coalescingConn
	if len(body) > smallBody {
		cc = corkable(r)
	}
	if cc == nil {
		w.WriteHeader(http.StatusOK)
		w.Write(body)
		return
	}
	cc.cork()
	defer cc.uncork() // also on a panic: a corked connection would hold every later answer
	w.WriteHeader(http.StatusOK)
	w.Write(body)
	// Into the cork: net/http's buffered headers and the body's tail. If w
	// cannot flush, the tail follows after the handler, still in order.
	http.NewResponseController(w).Flush()
}

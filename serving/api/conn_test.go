package api

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/topk-dev/topk/schemas"
)

// countingListener counts the write syscalls of the connections it accepts.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestServeOneWritePerAnswer: through Serve (the binary's path), a
// pre-rendered answer larger than net/http's 4 KB buffer leaves in one
// write, and every answer is the same, header for header and byte for byte,
// as through a plain http.Server on the same handler.
func TestServeOneWritePerAnswer(t *testing.T) {
	e := newEnv(t, nil)
	k := key("video", "global", schemas.Window1h)
	e.publish(t, mkList(k, 1, 1100, 1))
	e.start(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, countingListener{ln, &writes}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	served := "http://" + ln.Addr().String()

	_, first := e.do(t, "GET", topPath(k, 100), nil, "")
	etag := ""
	for _, c := range []struct {
		name, method, path string
		hdr                map[string]string
		oneWrite           bool
	}{
		{"k=100", "GET", topPath(k, 100), nil, true},
		{"k=100 again, same connection", "GET", topPath(k, 100), nil, true},
		{"k=1000", "GET", topPath(k, 1000), nil, true},
		{"k=100 gzip", "GET", topPath(k, 100), map[string]string{"Accept-Encoding": "gzip"}, true},
		{"k=3 (small)", "GET", topPath(k, 3), nil, true},
		{"HEAD k=100", "HEAD", topPath(k, 100), nil, true},
		{"not modified", "GET", topPath(k, 100), map[string]string{"If-None-Match": "<etag>"}, true},
		{"bad parameter", "GET", topPath(k, 100) + "&x=1", nil, false},
		{"lists", "GET", "/v1/lists", nil, false},
	} {
		hdr := c.hdr
		if hdr["If-None-Match"] == "<etag>" {
			hdr = map[string]string{"If-None-Match": etag}
		}
		want, wantBody := e.do(t, c.method, c.path, hdr, "")
		before := writes.Load()
		got, gotBody := request(t, c.method, served+c.path, hdr, "")
		n := writes.Load() - before
		if c.oneWrite && n != 1 {
			t.Errorf("%s: %d writes, want 1", c.name, n)
		}
		if got.StatusCode != want.StatusCode || !bytes.Equal(gotBody, wantBody) {
			t.Errorf("%s: status %d, %d bytes; plain server: %d, %d bytes", c.name, got.StatusCode, len(gotBody), want.StatusCode, len(wantBody))
		}
		want.Header.Del("Date")
		got.Header.Del("Date")
		if g, w := got.Header, want.Header; len(g) != len(w) {
			t.Errorf("%s: headers %v, plain server %v", c.name, g, w)
		} else {
			for h := range w {
				if g.Get(h) != w.Get(h) {
					t.Errorf("%s: %s = %q, plain server %q", c.name, h, g.Get(h), w.Get(h))
				}
			}
		}
		if c.path == topPath(k, 100) && c.method == "GET" && c.hdr == nil {
			etag = got.Header.Get("Etag")
			if !bytes.Equal(gotBody, first) {
				t.Errorf("%s: body differs from the first read", c.name)
			}
		}
	}
}

// failConn fails every write and records Close.
type failConn struct {
	net.Conn
	closed bool
}

func (c *failConn) Write(p []byte) (int, error) { return 0, errors.New("broken pipe") }
func (c *failConn) Close() error                { c.closed = true; return nil }

// TestUncorkFailureClosesConnection: a held answer that cannot be sent
// closes the connection, and net/http's next write sees the error.
func TestUncorkFailureClosesConnection(t *testing.T) {
	fc := &failConn{}
	c := &coalescingConn{Conn: fc}
	c.cork()
	if n, err := c.Write([]byte("held")); n != 4 || err != nil {
		t.Fatalf("corked write: %d, %v", n, err)
	}
	c.uncork()
	if !fc.closed {
		t.Error("connection not closed after a failed uncork")
	}
	if _, err := c.Write([]byte("next")); err == nil {
		t.Error("write after a failed uncork succeeded")
	}
	c.uncork() // not corked: nothing to do
}

// Package faults injects failures into topk's dependencies for tests: a
// loopback TCP proxy that can cut a service off and bring it back on the
// same address (Proxy), used where the service itself cannot be stopped and
// restarted with its data (an in-process bttest or pstest); and, in its
// test, the fault-injection suite that runs the serving binary against real
// services and stops, restarts and cuts them one at a time.
package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards loopback TCP connections to a backend. Cut closes every
// connection and refuses new ones (connection refused, as a service that
// is down); Restore accepts again on the same address.
type Proxy struct {
	backend string
	addr    string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to backend.
func NewProxy(backend string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{backend: backend, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	b, err := net.DialTimeout("tcp", p.backend, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		b.Close()
		return
	}
	p.conns[c], p.conns[b] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var once sync.Once
	done := func() {
		once.Do(func() {
			c.Close()
			b.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, b)
			p.mu.Unlock()
		})
	}
	go func() { io.Copy(b, c); done() }()
	io.Copy(c, b)
	done()
}

// Cut closes the listener and every open connection, and returns how many
// client connections it closed.
func (p *Proxy) Cut() (closed int) {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
	return len(conns) / 2 // each forwarded connection is a client and a backend conn
}

// Restore listens again on the same address.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return nil
	}
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port can take a moment to be free again
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.Join(errors.New("faults: restore "+p.addr), err)
}

// Close cuts the proxy for good.
func (p *Proxy) Close() { p.Cut() }

// Package redisx connects to Redis the way every topk binary does: the
// address given (a flag), else REDIS_ADDR, else an embedded in-process
// server (github.com/alicebob/miniredis) for the local all-in-one run.
package redisx

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// EnvAddr is the variable naming a real Redis server.
const EnvAddr = "REDIS_ADDR"

// Conn is a client and, when embedded, the server behind it.
type Conn struct {
	Client   *redis.Client
	Addr     string
	Embedded *miniredis.Miniredis // nil for a real server
}

// Connect dials addr, or REDIS_ADDR, or starts an embedded server, and
// checks the connection with a PING.
func Connect(ctx context.Context, addr string) (*Conn, error) {
	if addr == "" {
		addr = os.Getenv(EnvAddr)
	}
	c := &Conn{Addr: addr}
	if addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, fmt.Errorf("embedded redis: %w", err)
		}
		c.Embedded, c.Addr = m, m.Addr()
	}
	c.Client = redis.NewClient(&redis.Options{
		Addr:         c.Addr,
		DialTimeout:  2 * time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
	})
	if err := c.Client.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", c.Addr, err)
	}
	return c, nil
}

// Close closes the client and stops an embedded server.
func (c *Conn) Close() error {
	err := c.Client.Close()
	if c.Embedded != nil {
		c.Embedded.Close()
	}
	return err
}

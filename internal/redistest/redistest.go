// Package redistest runs a private redis-server for outage tests: on a
// spare loopback port, without persistence, owned by the test (never the
// machine's shared Redis), so a test can freeze it (SIGSTOP), kill it and
// start it again on the same port, empty, as a restarted cache would be.
// Tests skip when the redis-server binary is missing.
package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process (restarted on the same port by Start).
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	Port int
	cmd  *exec.Cmd
}

// New starts a redis-server on a free loopback port; it is killed when the
// test ends.
func New(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server binary not found (apt-get install redis-server): the Redis outage test did not run")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{t: t, bin: bin, dir: t.TempDir(), Port: port}
	t.Cleanup(s.Kill)
	s.Start()
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Start starts the server (again) on its port and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer within 10s", s.Addr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server (SIGKILL, by its own PID) and waits for it; its
// data is gone.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// Freeze stops the process (SIGSTOP): connections are accepted by the
// kernel but never answered, as with a hung server.
func (s *Server) Freeze() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT), data intact.
func (s *Server) Thaw() { s.cmd.Process.Signal(syscall.SIGCONT) }

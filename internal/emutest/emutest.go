// Package emutest runs a private official Pub/Sub emulator (the gcloud
// SDK's, a JVM) for restart tests: on a spare loopback port, owned by the
// test and stopped by its own PID, never the shared one CI starts, so a test
// can kill it and start it again on the same port (empty, as a restarted
// emulator is). Tests skip when the SDK's emulator is not installed.
package emutest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PubSub is one emulator process (restarted on the same port by Start).
type PubSub struct {
	t    testing.TB
	bin  string
	Port int
	cmd  *exec.Cmd
	log  *os.File
}

// binary finds the SDK's cloud-pubsub-emulator script, which execs the JVM
// (so its PID is the emulator's).
func binary() (string, bool) {
	g, err := exec.LookPath("gcloud")
	if err != nil {
		return "", false
	}
	if r, err := filepath.EvalSymlinks(g); err == nil {
		g = r
	}
	bin := filepath.Join(filepath.Dir(filepath.Dir(g)), "platform", "pubsub-emulator", "bin", "cloud-pubsub-emulator")
	if _, err := os.Stat(bin); err != nil {
		return "", false
	}
	return bin, true
}

// NewPubSub starts an emulator on a free port; it is killed when the test
// ends.
func NewPubSub(t testing.TB) *PubSub {
	t.Helper()
	bin, ok := binary()
	if !ok {
		t.Skip("the gcloud SDK's Pub/Sub emulator is not installed: the emulator restart test did not run")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	log, err := os.Create(filepath.Join(t.TempDir(), "pubsub-emulator.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &PubSub{t: t, bin: bin, Port: port, log: log}
	t.Cleanup(func() { p.Kill(); log.Close() })
	p.Start()
	return p
}

// Addr is host:port, for PUBSUB_EMULATOR_HOST.
func (p *PubSub) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// Start starts the emulator (again) and waits until it accepts connections
// (a JVM: a few seconds).
func (p *PubSub) Start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, "--host=127.0.0.1", "--port="+strconv.Itoa(p.Port))
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("pubsub emulator not listening on %s after 60 s (log %s)", p.Addr(), p.log.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the emulator with SIGKILL, by its PID, and waits for it.
func (p *PubSub) Kill() {
	if p.cmd != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// Available reports whether the SDK's Pub/Sub emulator is installed.
func Available() bool {
	_, ok := binary()
	return ok
}

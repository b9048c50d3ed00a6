package main

import (
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/topk-dev/topk/serving/api"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("TOPK_ADMIN_TOKEN", "from-env")
	cfg, err := parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != ":8080" || cfg.PubSubProject != "topk-local" || cfg.Topic != "views" || !cfg.Local ||
		cfg.AdminToken != "from-env" || cfg.StaleAfter != 2*time.Minute || cfg.RedisAddr != "" {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{
		"--addr=127.0.0.1:9999", "--redis=10.0.0.1:6379", "--admin_token=flag", "--stale_after=30s", "--types=video, hashtag", "--local=false",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9999" || cfg.RedisAddr != "10.0.0.1:6379" || cfg.AdminToken != "flag" ||
		cfg.StaleAfter != 30*time.Second || strings.Join(cfg.Types, ",") != "video,hashtag" || cfg.Local {
		t.Fatalf("flags: %+v", cfg)
	}
	for _, bad := range [][]string{{"--types=Video"}, {"--stale_after=-1s"}, {"extra"}, {"--log_level=loud"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if _, err := parseFlags(fs, bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The binary's path end to end: embedded Redis and Pub/Sub (local mode),
// serving on a port, graceful shutdown when the context ends.
func TestRunLocalModeAndShutdown(t *testing.T) {
	t.Setenv("REDIS_ADDR", "")
	t.Setenv("PUBSUB_EMULATOR_HOST", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg, err := parseFlags(fs, []string{"--addr=" + addr, "--log_level=error"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- api.Run(ctx, cfg) }()
	var resp *http.Response
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err = http.Get("http://" + addr + "/readyz")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

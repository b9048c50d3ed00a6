package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/topk-dev/topk/pipelines/internal/beamrun"
)

// A --source file that does not exist is refused by Config, before any job
// is built, with one line naming the file.
func TestConfigMissingFile(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs)
	f.Source = "file:/nonexistent/events.ndjson"
	_, err := f.Config("")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/events.ndjson") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Config = %v; want one line naming the missing file", err)
	}
}

// --help starts with the summary, lists this command's flags before Beam's,
// and every flag once.
func TestUsageOrder(t *testing.T) {
	var f Flags
	own := flag.NewFlagSet("streaming", flag.ContinueOnError)
	f.Register(own)
	var buf bytes.Buffer
	flag.CommandLine.SetOutput(&buf)
	defer flag.CommandLine.SetOutput(nil)
	beamrun.Share(own)
	beamrun.Usage("streaming: summary.", "streaming --source=SOURCE [flags]", own)()
	out := buf.String()
	if !strings.HasPrefix(out, "streaming: summary.\n") {
		t.Fatalf("usage does not start with the summary:\n%.200s", out)
	}
	src, runner := strings.Index(out, "\n  -source "), strings.Index(out, "\n  -runner ")
	if src < 0 || runner < 0 || src > runner {
		t.Fatalf("-source at %d, -runner at %d: the command's flags must come first", src, runner)
	}
	if n := strings.Count(out, "\n  -source "); n != 1 {
		t.Fatalf("-source listed %d times", n)
	}
}

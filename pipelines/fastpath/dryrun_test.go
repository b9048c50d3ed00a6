package fastpath

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners"

	"github.com/topk-dev/topk/transforms/source"
)

// dryRunChildEnv marks the subprocess of TestDataflowDryRun: Beam's runner
// flags are process-wide, and the other tests of this package run on Prism.
const dryRunChildEnv = "TOPK_FASTPATH_DRYRUN_CHILD"

const (
	dryRunSubscription = "projects/p/subscriptions/s"
	dryRunDone         = "fastpath: dataflow dry run translated"
)

// TestDataflowDryRun: the streaming job (Pub/Sub source with Dataflow's
// native read, every window, publish) translates for Dataflow offline with
// --runner=dataflow --dry_run, without credentials: the run returns no error
// and the translated job is a streaming job whose source is Dataflow's
// Pub/Sub read of the subscription. It runs
// in a subprocess (this test binary again, with the Beam flags on its command
// line and no credentials in its environment).
func TestDataflowDryRun(t *testing.T) {
	if os.Getenv(dryRunChildEnv) == "1" {
		dryRunChild(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestDataflowDryRun$", "-test.v", "-test.count=1",
		"--runner=dataflow", "--dry_run", "--project=p", "--region=r",
		"--staging_location=gs://b/s", "--temp_location=gs://b/t")
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "HOME", "PUBSUB_EMULATOR_HOST", dryRunChildEnv:
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// No credentials anywhere the Google client libraries look.
	cmd.Env = append(cmd.Env, dryRunChildEnv+"=1", "HOME="+home, "CLOUDSDK_CONFIG="+home,
		"GOOGLE_APPLICATION_CREDENTIALS="+home+"/none.json")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("dry run subprocess failed (%v) after %v:\n%s", err, took, lastLines(out, 60))
	}
	for _, want := range []string{
		dryRunDone,
		"Dry-run: not submitting job!",
		"JOB_TYPE_STREAMING",
		"beam:transform:pubsub_read:v1", // Dataflow's native read, not our reader
		dryRunSubscription,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, lastLines(out, 60))
		}
	}
	t.Logf("dry run translated in a subprocess in %v (%d bytes of output)", took, len(out))
}

// dryRunChild builds the job and runs it on the "dataflow" runner with the
// flags its parent gave it; any error fails it.
func dryRunChild(t *testing.T) {
	if *runners.Runner != "dataflow" {
		t.Fatalf("--runner=%q, want dataflow", *runners.Runner)
	}
	spec, err := source.ParseSpec("pubsub:" + dryRunSubscription)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Source = spec
	cfg.SourceOpts = source.Options{Runner: source.RunnerDataflow}
	// A dry run publishes nowhere: no Redis, no files, no dead-letter dir.
	p, s := beam.NewPipelineWithRoot()
	if err := Build(s, cfg); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := beam.Run(context.Background(), "dataflow", p); err != nil {
		t.Fatalf("dataflow dry run: %v", err)
	}
	fmt.Printf("%s in %v\n", dryRunDone, time.Since(start))
}

// lastLines is the end of a long output, for failure messages.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

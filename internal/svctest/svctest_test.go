package svctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Property: every call appends one tab-separated line naming the outcome,
// the service and the test (package-qualified), and Need skips without the
// service.
func TestRecordLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "variants")
	t.Setenv(EnvFile, path)
	t.Run("real", func(t *testing.T) { Report(t, "redis", true) })
	t.Run("standin", func(t *testing.T) { Report(t, "redis", false, "miniredis") })
	t.Run("need", func(t *testing.T) { Need(t, "bigtable", true, "") })
	skipped := t.Run("missing", func(t *testing.T) {
		Need(t, "pubsub", false, "PUBSUB_EMULATOR_HOST is not set")
		t.Error("Need did not skip")
	})
	if !skipped {
		t.Fatal("the skipped subtest failed")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ran\tredis\tinternal/svctest.TestRecordLines/real\t",
		"standin\tredis\tinternal/svctest.TestRecordLines/standin\tminiredis",
		"ran\tbigtable\tinternal/svctest.TestRecordLines/need\t",
		"skipped\tpubsub\tinternal/svctest.TestRecordLines/missing\tPUBSUB_EMULATOR_HOST is not set",
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines %q, want %q", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d = %q, want %q", i, got[i], want[i])
		}
	}
}

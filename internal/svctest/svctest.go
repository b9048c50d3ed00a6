// Package svctest records which service-backed test variants ran against the
// real service (Redis, the Pub/Sub and Bigtable emulators) and which were
// skipped or fell back to an in-process stand-in, so that a run says what it
// tested. Tests call Need (skip without the service) or Report (fall back to
// a stand-in); both log a line in the test's output and, when the variable
// TOPK_SERVICE_VARIANTS names a file, append one line to it:
//
//	ran<TAB>redis<TAB>serving/api.TestRollback
//	skipped<TAB>bigtable<TAB>transforms/exact/store.TestX/emulator<TAB>BIGTABLE_EMULATOR_HOST is not set
//	standin<TAB>redis<TAB>serving/catalogue.TestLoadGet<TAB>REDIS_ADDR is not set: miniredis
//
// .ci/run sets the variable, prints a summary and fails when a line is not
// "ran" (CI starts every service, so nothing may be skipped there):
// scripts/variants.sh is that check.
package svctest

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
)

// EnvFile names the file the lines are appended to.
const EnvFile = "TOPK_SERVICE_VARIANTS"

// Outcomes written in the first column.
const (
	Ran     = "ran"
	Skipped = "skipped"
	Standin = "standin"
)

var mu sync.Mutex

// Need records that t needs service: when available it is recorded as ran,
// otherwise as skipped with why, and t is skipped.
func Need(t testing.TB, service string, available bool, why string) {
	t.Helper()
	if available {
		record(t, Ran, service, "")
		return
	}
	record(t, Skipped, service, why)
	t.Skip(service + ": " + why)
}

// Report records that t runs against the real service (real) or an
// in-process stand-in (then why says which and why).
func Report(t testing.TB, service string, real bool, why ...string) {
	t.Helper()
	if real {
		record(t, Ran, service, "")
		return
	}
	reason := strings.Join(why, " ")
	if reason == "" {
		reason = "the service is not configured: an in-process stand-in ran instead"
	}
	record(t, Standin, service, reason)
}

func record(t testing.TB, outcome, service, why string) {
	t.Helper()
	name := pkgName() + "." + t.Name()
	if why != "" {
		t.Logf("service variant %s: %s (%s)", outcome, service, why)
	} else {
		t.Logf("service variant %s: %s", outcome, service)
	}
	path := os.Getenv(EnvFile)
	if path == "" {
		return
	}
	line := strings.Join([]string{outcome, service, name, why}, "\t")
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Errorf("svctest: %v", err)
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, strings.ReplaceAll(line, "\n", " ")); err != nil {
		t.Errorf("svctest: %v", err)
	}
}

// pkgName is the test binary's package path relative to the module, from
// the build info ("serving/api"), or the binary's name.
func pkgName() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		p := strings.TrimSuffix(bi.Path, ".test")
		if m := bi.Main.Path; m != "" {
			p = strings.TrimPrefix(strings.TrimPrefix(p, m), "/")
		}
		if p != "" {
			return p
		}
	}
	return os.Args[0]
}

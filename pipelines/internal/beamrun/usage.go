package beamrun

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/log"
)

// Usage returns a flag.Usage for a pipeline command: its one-line summary,
// its synopsis, the command's own flags (those defined on project), then
// every other flag on flag.CommandLine (Beam's runner, Dataflow and SDK
// flags) under a heading of their own. Define the command's flags on
// project and copy them to flag.CommandLine with Share.
func Usage(summary, synopsis string, project *flag.FlagSet) func() {
	return func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, "%s\n\nUsage: %s\n\nFlags of this command:\n", summary, synopsis)
		project.SetOutput(w)
		project.PrintDefaults()
		rest := flag.NewFlagSet("beam", flag.ContinueOnError)
		flag.CommandLine.VisitAll(func(f *flag.Flag) {
			if project.Lookup(f.Name) == nil {
				rest.Var(f.Value, f.Name, f.Usage)
				rest.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		fmt.Fprintf(w, "\nBeam flags (--runner: prism in-process by default, universal, dataflow; Dataflow's project, region, staging; SDK options):\n")
		rest.SetOutput(w)
		rest.PrintDefaults()
	}
}

// Share defines every flag of project on flag.CommandLine too, with the
// same value, so that flag.Parse sets them.
func Share(project *flag.FlagSet) {
	project.VisitAll(func(f *flag.Flag) { flag.CommandLine.Var(f.Value, f.Name, f.Usage) })
}

// dryRunLog is a Beam logger for Dataflow's --dry_run: the runner logs the
// pipeline proto and the translated job (tens of KB of escaped JSON) at
// info level; they go to a file, and only warnings and errors to stderr.
type dryRunLog struct {
	mu    sync.Mutex
	file  *os.File
	err   io.Writer
	bytes int
}

func (l *dryRunLog) Log(_ context.Context, sev log.Severity, _ int, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, _ := fmt.Fprintf(l.file, "%s %s\n", sevName(sev), msg)
	l.bytes += n
	if sev >= log.SevWarn {
		fmt.Fprintf(l.err, "%s %s\n", sevName(sev), msg)
	}
}

func sevName(s log.Severity) string {
	switch s {
	case log.SevDebug:
		return "DEBUG"
	case log.SevInfo:
		return "INFO"
	case log.SevWarn:
		return "WARN"
	case log.SevError:
		return "ERROR"
	case log.SevFatal:
		return "FATAL"
	}
	return "LOG"
}

// IsDryRun reports whether Dataflow's --dry_run flag is set.
func IsDryRun() bool {
	fl := flag.Lookup("dry_run")
	return fl != nil && fl.Value.String() == "true"
}

// logDryRun sends Beam's log to a file in the temporary directory for a
// dry run, and returns a func that prints one line saying where it went;
// outside a dry run it does nothing.
func logDryRun(name string) (done func(), err error) {
	if !IsDryRun() {
		return func() {}, nil
	}
	f, err := os.CreateTemp("", name+"-dataflow-dry-run-*.log")
	if err != nil {
		return nil, fmt.Errorf("dry run log: %w", err)
	}
	l := &dryRunLog{file: f, err: os.Stderr}
	log.SetLogger(l)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		f.Close()
		fmt.Fprintf(os.Stderr, "%s: dataflow dry run: job not submitted; the pipeline proto and the translated job description (%d KB) are in %s\n",
			name, (l.bytes+1023)/1024, f.Name())
	}, nil
}

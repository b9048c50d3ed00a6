package archive

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/topk-dev/topk/schemas"
)

// Property: Prune deletes exactly the event hours that ended at or before
// now - keep (their own files, late files and marker), keeps every later
// hour whole, never touches the exact tables, and a second prune finds
// nothing more to do; on local and gs:// roots.
func TestPrune(t *testing.T) {
	forEachRoot(t, func(t *testing.T, newRoot func(testing.TB) string) {
		ctx := context.Background()
		root := newRoot(t)
		now := time.Date(2026, 12, 31, 10, 20, 0, 0, time.UTC)
		keep := 30 * 24 * time.Hour
		cutoff := now.Add(-keep) // 2026-12-01T10:20
		hours := []time.Time{
			cutoff.Add(-48 * time.Hour).Truncate(time.Hour), // long gone
			cutoff.Truncate(time.Hour).Add(-time.Hour),      // ends 10:00 <= cutoff: deleted
			cutoff.Truncate(time.Hour),                      // ends 11:00 > cutoff: kept
			now.Truncate(time.Hour).Add(-2 * time.Hour),     // recent
		}
		write := func(p string) {
			t.Helper()
			if err := WriteFile(ctx, p, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range hours {
			dir := schemas.ArchiveHourPath(root, h)
			write(dir + "/part-a-000001.parquet")
			write(dir + "/part-b-000001.parquet")
			write(dir + "/late/part-a-000002.parquet")
			write(dir + "/" + schemas.ArchiveClosed)
			write(schemas.ExactHourPath(root, h))
		}
		rep, err := Prune(ctx, root, keep, now)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Deleted) != 2 || !rep.Deleted[0].Equal(hours[0]) || !rep.Deleted[1].Equal(hours[1]) {
			t.Fatalf("deleted %v, want %v", rep.Deleted, hours[:2])
		}
		if rep.Files != 8 || rep.Kept != 2 || !rep.Oldest.Equal(hours[2]) {
			t.Fatalf("report %+v, want 8 files, 2 kept, oldest %v", rep, hours[2])
		}
		for i, h := range hours {
			files, closed, err := ListHour(root, h)
			if err != nil {
				t.Fatal(err)
			}
			gone := i < 2
			if gone && (len(files) != 0 || closed) {
				t.Errorf("%v: %d files, closed=%v after its deletion", h, len(files), closed)
			}
			if !gone && (len(files) != 3 || !closed) {
				t.Errorf("%v: %d files, closed=%v; want 3 files, closed", h, len(files), closed)
			}
			f, err := OpenFile(ctx, schemas.ExactHourPath(root, h))
			if err != nil {
				t.Errorf("%v: exact table gone: %v", h, err)
				continue
			}
			f.Close()
		}
		closedHours, err := ClosedHours(ctx, root)
		if err != nil || len(closedHours) != 2 {
			t.Fatalf("closed hours after prune %v, %v; want the 2 kept", closedHours, err)
		}
		again, err := Prune(ctx, root, keep, now)
		if err != nil || len(again.Deleted) != 0 || again.Files != 0 || again.Kept != 2 {
			t.Fatalf("second prune %+v, %v; want nothing deleted", again, err)
		}
	})
}

// Property: RunRetention prunes at once, reports, and returns when ctx ends;
// a retention too short to let an hour close and be recounted is refused.
func TestRunRetention(t *testing.T) {
	root := t.TempDir()
	h := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := WriteFile(context.Background(), schemas.ArchiveHourPath(root, h)+"/part-a-000001.parquet", func(w io.Writer) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan PruneReport, 4)
	done := make(chan error, 1)
	go func() {
		done <- RunRetention(ctx, RetentionConfig{Root: root, Every: time.Hour, Logger: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return h.AddDate(0, 2, 0) },
			Report: func(r PruneReport, err error) {
				if err != nil {
					t.Error(err)
				}
				reports <- r
			}})
	}()
	select {
	case r := <-reports:
		if len(r.Deleted) != 1 || r.Files != 1 {
			t.Fatalf("first prune %+v, want the one hour deleted", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no prune reported")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	bad := RetentionConfig{Root: root, Keep: time.Hour}
	if err := bad.Validate(); err == nil {
		t.Fatal("a one-hour retention was accepted")
	}
}

package archive

// Retention: raw event hours are kept Retention (default 30 days, the
// seeds' "raw events kept 30 days so any day can be recomputed") and then
// deleted; the exact hourly tables (exact/ under the same root, and the
// Bigtable exact store) are kept forever: Prune never lists or touches
// anything outside events/.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"cloud.google.com/go/storage"

	"github.com/topk-dev/topk/schemas"
)

// DefaultRetention is how long an event hour's raw files are kept after the
// hour ends.
const DefaultRetention = 30 * 24 * time.Hour

// DefaultPruneEvery is how often RunRetention prunes.
const DefaultPruneEvery = time.Hour

// PruneReport says what one Prune did.
type PruneReport struct {
	// Deleted are the event hours deleted, in order.
	Deleted []time.Time
	// Files is the number of files (objects) deleted.
	Files int
	// Kept is the number of event hours left.
	Kept int
	// Oldest is the oldest hour kept (zero when none is).
	Oldest time.Time
}

// Prune deletes every event hour under root (a local folder or
// gs://bucket/prefix) that ended more than keep before now: the hour's
// files, its late/ files, then its _CLOSED marker last (so that an
// interrupted prune leaves a closed hour looking closed, and the next prune
// finishes it). Exact tables are never touched. keep must be positive.
func Prune(ctx context.Context, root string, keep time.Duration, now time.Time) (PruneReport, error) {
	var rep PruneReport
	if keep <= 0 {
		return rep, fmt.Errorf("prune %s: retention %v must be positive", root, keep)
	}
	st, err := openRoot(root)
	if err != nil {
		return rep, fmt.Errorf("prune: %w", err)
	}
	_, dirs, err := st.list(ctx, schemas.ArchiveEventsDir)
	if err != nil {
		return rep, fmt.Errorf("prune %s: list hours: %w", root, err)
	}
	cutoff := now.Add(-keep)
	for _, d := range dirs {
		h, err := schemas.ParseHourDir(d)
		if err != nil {
			continue // not ours
		}
		if h.Add(time.Hour).After(cutoff) {
			rep.Kept++
			if rep.Oldest.IsZero() || h.Before(rep.Oldest) {
				rep.Oldest = h
			}
			continue
		}
		n, err := deleteHour(ctx, st, h)
		rep.Files += n
		if err != nil {
			return rep, fmt.Errorf("prune %s: %s: %w", root, schemas.HourDir(h), err)
		}
		rep.Deleted = append(rep.Deleted, h)
	}
	return rep, nil
}

// deleteHour deletes one hour's files, late files and marker (last), and
// its folders where a store has folders. It returns the files deleted.
func deleteHour(ctx context.Context, st store, h time.Time) (int, error) {
	dir := hourDir(h)
	late := dir + "/" + schemas.ArchiveLateDir
	var names []string
	for _, d := range []string{late, dir} {
		files, _, err := st.list(ctx, d)
		if err != nil {
			return 0, err
		}
		for _, f := range files {
			if f != schemas.ArchiveClosed {
				names = append(names, d+"/"+f)
			}
		}
	}
	names = append(names, dir+"/"+schemas.ArchiveClosed)
	n := 0
	for _, name := range names {
		ok, err := remove(ctx, st, name)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	if l, ok := st.(localRoot); ok {
		for _, d := range []string{late, dir} {
			if err := os.Remove(l.addr(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
		}
	}
	return n, nil
}

// remove deletes one file; a missing file is not an error (false).
func remove(ctx context.Context, st store, name string) (bool, error) {
	switch s := st.(type) {
	case localRoot:
		err := os.Remove(s.addr(name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	case gcsRoot:
		o, err := s.handle(ctx, name)
		if err != nil {
			return false, err
		}
		err = o.Delete(ctx)
		if errors.Is(err, storage.ErrObjectNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	return false, fmt.Errorf("delete %s: root type %T cannot delete", name, st)
}

// RetentionConfig configures RunRetention.
type RetentionConfig struct {
	// Root is the archive root.
	Root string
	// Keep is how long an hour is kept after it ends. Zero:
	// DefaultRetention. Negative: never prune (RunRetention returns at once).
	Keep time.Duration
	// Every is the time between prunes. Zero: DefaultPruneEvery.
	Every time.Duration
	// Now is the clock. Zero: time.Now.
	Now func() time.Time
	// Logger. Zero: slog.Default().
	Logger *slog.Logger
	// Report, when set, is called after every prune (metrics).
	Report func(PruneReport, error)
}

// Validate checks the configuration and fills the defaults.
func (c *RetentionConfig) Validate() error {
	if c.Root == "" {
		return errors.New("retention: archive root is empty")
	}
	if strings.Contains(c.Root, "://") && !IsGCS(c.Root) {
		return fmt.Errorf("retention: root %q is neither a folder nor gs://", c.Root)
	}
	if c.Keep == 0 {
		c.Keep = DefaultRetention
	}
	if c.Keep > 0 && c.Keep < 2*time.Hour {
		return fmt.Errorf("retention: keeping %v is less than two hours: hours would be deleted before they close and are recounted", c.Keep)
	}
	if c.Every == 0 {
		c.Every = DefaultPruneEvery
	}
	if c.Every < 0 {
		return fmt.Errorf("retention: every %v is negative", c.Every)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// RunRetention prunes cfg.Root now and every cfg.Every until ctx is done. A
// failed prune is logged (and reported) and tried again next time.
func RunRetention(ctx context.Context, cfg RetentionConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Keep < 0 {
		return nil
	}
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	for {
		rep, err := Prune(ctx, cfg.Root, cfg.Keep, cfg.Now())
		if cfg.Report != nil {
			cfg.Report(rep, err)
		}
		switch {
		case err != nil && ctx.Err() == nil:
			cfg.Logger.Error("retention: prune failed", "root", cfg.Root, "err", err)
		case len(rep.Deleted) > 0:
			cfg.Logger.Info("retention: deleted event hours", "root", cfg.Root, "hours", len(rep.Deleted),
				"first", rep.Deleted[0], "last", rep.Deleted[len(rep.Deleted)-1], "files", rep.Files, "kept", rep.Kept)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

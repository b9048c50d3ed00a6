package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// hourEnds keeps what grading needs from the fast path: every 1h list
// version whose as_of is an hour's end, copied from Redis into
// dir/{type}/{scope}/1h/{as_of unix ms}.json (the layout of the streaming
// command's --lists_out, which the recount grades from). Redis holds a
// version for liststore's old-version TTL (2 minutes) after it stopped
// being the previous one, that is about 4 minutes after the next minute's
// list replaced it, so a sweep every 20 seconds finds every list of the
// hour's end once the fast path has published it.
type hourEnds struct {
	lists *liststore.Store
	dir   string
	// since is when the run started: an hour end before it was not seen.
	since time.Time
	// skip is an hour end not to copy (zero: none): its hour holds archived
	// events of an earlier run that this run's fast path never saw, so its
	// list would be graded against events it could not count.
	skip time.Time

	mu   sync.Mutex
	done map[time.Time]map[schemas.ListKey]bool // lists copied, by hour end
}

func newHourEnds(lists *liststore.Store, dir string, since, skip time.Time) *hourEnds {
	return &hourEnds{lists: lists, dir: dir, since: since, skip: skip, done: map[time.Time]map[schemas.ListKey]bool{}}
}

// first is the first hour end the run grades.
func (h *hourEnds) first() time.Time {
	end := h.since.Truncate(time.Hour).Add(time.Hour)
	if end.Equal(h.skip) {
		end = end.Add(time.Hour)
	}
	return end
}

// loop sweeps the current hour's end every period, for the first window
// of each hour (the versions of its end are gone from Redis after that),
// until ctx ends.
func (h *hourEnds) loop(ctx context.Context, period, window time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UTC()
		if end := now.Truncate(time.Hour); now.Sub(end) < window {
			// A failed sweep (Redis restarting) is tried again at the next tick.
			_, _ = h.sweep(ctx, end)
		}
	}
}

// sweep copies every 1h list's version end (as_of = end) that Redis still
// holds and that was not copied yet; it returns how many it copied.
func (h *hourEnds) sweep(ctx context.Context, end time.Time) (int, error) {
	if end.Equal(h.skip) {
		return 0, nil
	}
	keys, err := h.lists.Keys(ctx)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	got := h.done[end]
	if got == nil {
		got = map[schemas.ListKey]bool{}
		h.done[end] = got
	}
	var todo []schemas.ListKey
	for _, k := range keys {
		if k.Window == schemas.Window1h && !got[k] {
			todo = append(todo, k)
		}
	}
	h.mu.Unlock()
	if len(todo) == 0 {
		return 0, nil
	}
	names := make([]string, len(todo))
	for i, k := range todo {
		names[i] = h.lists.BlobKey(k, end.Unix())
	}
	vals, err := h.lists.Client().MGet(ctx, names...).Result()
	if err != nil {
		return 0, fmt.Errorf("hour-end lists: %w", err)
	}
	n := 0
	for i, v := range vals {
		raw, ok := v.(string)
		if !ok {
			continue // not published yet, or expired
		}
		l, err := schemas.UnmarshalList([]byte(raw))
		if err != nil || !l.AsOf.Equal(end) {
			continue
		}
		if err := writeFileAtomic(h.path(todo[i], end), []byte(raw)); err != nil {
			return n, fmt.Errorf("hour-end lists: %w", err)
		}
		h.mu.Lock()
		got[todo[i]] = true
		h.mu.Unlock()
		n++
	}
	return n, nil
}

// path is where the recount looks for k's list at as_of end
// (pipelines/recount's gradeHour).
func (h *hourEnds) path(k schemas.ListKey, end time.Time) string {
	return filepath.Join(h.dir, k.Type, k.Scope, string(schemas.Window1h), strconv.FormatInt(end.UnixMilli(), 10)+".json")
}

// pending says whether the hour ending at end should wait before it is
// recounted: the run was up at its end, the hour is not skipped, no list of
// that end has been copied yet, and less than wait has passed since it. A
// recount does not grade an hour again, so recounting it before its lists
// are copied would leave it ungraded.
func (h *hourEnds) pending(end time.Time, now time.Time, wait time.Duration) bool {
	if end.Before(h.since) || end.Equal(h.skip) || now.Sub(end) >= wait {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.done[end]) == 0
}

// forget deletes the copied lists of the end of hour (store.HourKey form)
// once the hour is graded: its grade is in the exact store and on
// /metrics, and the lists would add up to about 20 MB an hour.
func (h *hourEnds) forget(hour string) {
	start, err := time.Parse(store.HourFormat, hour)
	if err != nil {
		return
	}
	end := start.Add(time.Hour)
	files, _ := filepath.Glob(filepath.Join(h.dir, "*", "*", string(schemas.Window1h), strconv.FormatInt(end.UnixMilli(), 10)+".json"))
	for _, f := range files {
		_ = os.Remove(f)
	}
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

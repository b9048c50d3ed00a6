package schemas

import (
	"fmt"
	"strings"
	"time"
)

// ArchiveEvent is one row of the archive's Parquet files: every accepted
// event, written by event hour, the input of the exact recount. TS is Unix
// milliseconds (Parquet INT64 with a TIMESTAMP(MILLIS) logical type).
type ArchiveEvent struct {
	EventID string    `parquet:"event_id"`
	Type    string    `parquet:"type,dict"`
	Item    string    `parquet:"item"`
	User    string    `parquet:"user,optional"`
	TS      time.Time `parquet:"ts,timestamp(millisecond)"`
	Country string    `parquet:"country,optional,dict"`
	Region  string    `parquet:"region,optional,dict"`
}

// ArchiveEventOf converts an event to its archive row.
func ArchiveEventOf(e *Event) ArchiveEvent {
	return ArchiveEvent{EventID: e.EventID, Type: e.Type, Item: e.Item, User: e.User,
		TS: e.TS.UTC().Truncate(time.Millisecond), Country: e.Country, Region: e.Region}
}

// Event converts an archive row back to an event.
func (a *ArchiveEvent) Event() Event {
	return Event{EventID: a.EventID, Type: a.Type, Item: a.Item, User: a.User,
		TS: a.TS.UTC(), Country: a.Country, Region: a.Region}
}

// ExactCount is one row of the exact hourly table (Parquet next to the
// archive, and Bigtable): the deduplicated count of an item in one scope over
// one event hour.
type ExactCount struct {
	Hour  time.Time `parquet:"hour,timestamp(millisecond)"`
	Type  string    `parquet:"type,dict"`
	Scope string    `parquet:"scope,dict"`
	Item  string    `parquet:"item"`
	Count int64     `parquet:"count"`
}

// Archive layout under a root (a local folder, or gs://bucket/prefix):
//
//	events/hour=2026-11-30T10/part-<writer>-<seq>.parquet   events of that event hour
//	events/hour=2026-11-30T10/late/part-....parquet         arriving after the hour closed
//	events/hour=2026-11-30T10/_CLOSED                       marker: the hour is closed
//	exact/hour=2026-11-30T10/counts.parquet                 the exact hourly table
//
// An hour is closed a grace period after it ends; a recount of the hour
// reads both the hour's files and its late/ folder.
const (
	ArchiveEventsDir = "events"
	ArchiveExactDir  = "exact"
	ArchiveLateDir   = "late"
	ArchiveClosed    = "_CLOSED"
)

// HourDir is the directory name of an event hour: "hour=2026-11-30T10".
func HourDir(hour time.Time) string { return "hour=" + hour.UTC().Format("2006-01-02T15") }

// ParseHourDir is the inverse of HourDir.
func ParseHourDir(name string) (time.Time, error) {
	const prefix = "hour="
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return time.Time{}, fmt.Errorf("archive dir %q is not hour=YYYY-MM-DDTHH", name)
	}
	t, err := time.Parse("2006-01-02T15", name[len(prefix):])
	if err != nil {
		return time.Time{}, fmt.Errorf("archive dir %q: %w", name, err)
	}
	return t, nil
}

// ArchiveHourPath is root/events/hour=... for an event hour.
func ArchiveHourPath(root string, hour time.Time) string {
	return joinRoot(root, ArchiveEventsDir, HourDir(hour))
}

// ExactHourPath is root/exact/hour=.../counts.parquet.
func ExactHourPath(root string, hour time.Time) string {
	return joinRoot(root, ArchiveExactDir, HourDir(hour), "counts.parquet")
}

// joinRoot joins with "/" without cleaning, so "gs://bucket" keeps its "//".
func joinRoot(root string, parts ...string) string {
	return strings.TrimSuffix(root, "/") + "/" + strings.Join(parts, "/")
}

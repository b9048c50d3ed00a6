// Package archive is the first step of the exact path (DESIGN.md section 2):
// a plain consumer, with its own Pub/Sub subscription on the "views" topic,
// that writes every event, by event hour, to Parquet files under an archive
// root, and closes each hour a grace period after it ends. It has no Beam
// import: it is a loop of unary Pulls, a buffer and a file writer.
//
// # Archive
//
// File layout under Config.Root (a local folder, or gs://bucket/prefix in
// Google Cloud Storage), as schemas/archive.go defines it:
//
//	events/hour=2026-11-30T10/part-<writer>-<seq>.parquet       events of that event hour
//	events/hour=2026-11-30T10/late/part-<writer>-<seq>.parquet  written after the hour closed
//	events/hour=2026-11-30T10/_CLOSED                           marker: the hour is closed
//	deadletter/part-<writer>-<seq>.ndjson                       rejected input, one schemas.DeadLetter per line
//
// Rows are schemas.ArchiveEvent (zstd-compressed Parquet); <writer> is a
// random id per Run, so restarts and parallel archivers never overwrite each
// other's files. Names starting with "." are temporary files: readers skip
// them (ListHour does).
//
// # Roots
//
// The file operations go through one small interface with two
// implementations. A local folder writes each file as a temporary file
// that is fsynced, renamed into place and its folder fsynced. A gs:// root
// (cloud.google.com/go/storage; credentials from Application Default
// Credentials, or STORAGE_EMULATOR_HOST's emulator) builds the file in
// memory, then uploads it: the object is durable once the Writer's Close
// has returned. The _CLOSED marker is uploaded with a DoesNotExist
// precondition, so of several archivers one writes it; listing an hour
// lists the objects under its prefix and under its late/ prefix, and the
// dead letters likewise. ListHour returns local paths or gs:// URLs, OpenFile
// opens either for reading (an *os.File, or range reads of the object in
// 1 MiB blocks, its size from its attributes), and WriteFile writes a file
// durably (the exact table, pipelines/exact). Tests run the gs:// side
// against an in-process fake (internal/gcstest).
//
// Delivery: at least once, never a loss. Pulled messages are decoded and
// their events buffered per event hour; a flush (every FlushEvery, at
// MaxRows buffered rows, before an hour closes, and on stop) writes one file
// per hour with buffered rows, and one dead-letter file, each durably (see
// Roots); only then are the flushed messages acknowledged. So a message is acked only after
// every file holding its events is durable.
// A crash or a failed flush between the write and the ack leaves the messages
// unacknowledged: Pub/Sub redelivers them and their events are archived a
// second time. Duplicates are expected in the archive; the exact recount drops
// them by event_id. A beacon that does not decode goes to the dead-letter
// folder whole, with its reason; an event that fails validation
// (Config.Validator) goes there alone; both are then acknowledged like any
// other message.
//
// Closing: an event hour H is closed once the wall clock (Config.Now) passes
// H + 1h + Grace. The archiver then flushes every buffered row (so the hour's
// own files are durable first) and writes H's _CLOSED marker. From then on,
// rows of H land in H's late/ folder: the recount of a closed hour reads both
// (ReadHour), and a late file is the sign that the hour needs recounting
// again. A file's folder is chosen just before its rename (or upload), from
// the marker, so no file of this archiver enters a closed hour's own folder. Hours left
// open by an earlier run are found under the root at start and closed when
// due. Several archivers may share the subscription; between them the
// marker-then-rename (or upload) check is not atomic, so a file may, within a few
// microseconds of the close, still enter the hour's own folder.
//
// Outages: the archiver waits them out instead of exiting. A Pull that
// fails (Pub/Sub down or restarting) is retried with capped backoff (at most
// 5 s between attempts); a subscription that disappears after the start (a
// restarted emulator) is recreated through Config.Recreate, or waited for.
// A file write that fails transiently (a Cloud Storage outage) is retried
// likewise before anything is acked; an ack that fails is logged and the
// messages are redelivered (a duplicate, never a loss). Messages a
// restarted emulator had not delivered are lost by the emulator itself.
//
// Stop: when the context ends (or, with IdleStop, after the subscription has
// been idle that long), Run flushes, acknowledges and returns nil.
package archive

package archive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
)

// DeadLetterDir is the dead-letter folder under the archive root.
const DeadLetterDir = "deadletter"

// hourDir is the folder of an event hour, relative to the root.
func hourDir(hour time.Time) string {
	return schemas.ArchiveEventsDir + "/" + schemas.HourDir(hour)
}

// isClosed reports whether the hour's marker exists.
func isClosed(ctx context.Context, st store, hour time.Time) (bool, error) {
	return st.exists(ctx, hourDir(hour)+"/"+schemas.ArchiveClosed)
}

// writeHourFile writes rows as one Parquet file of hour: into the hour's own
// folder, or its late/ folder when the hour is closed at the moment of the
// rename (local) or upload (Cloud Storage). It reports whether the file
// went to late/.
func writeHourFile(ctx context.Context, st store, hour time.Time, name string, rows []schemas.ArchiveEvent) (late bool, err error) {
	dir := hourDir(hour)
	err = st.write(ctx, dir, name, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[schemas.ArchiveEvent](w, parquet.Compression(&parquet.Zstd))
		if _, err := pw.Write(rows); err != nil {
			return fmt.Errorf("parquet write: %w", err)
		}
		if err := pw.Close(); err != nil {
			return fmt.Errorf("parquet close: %w", err)
		}
		return nil
	}, func() (string, error) {
		closed, err := isClosed(ctx, st, hour)
		if err != nil {
			return "", err
		}
		late = closed
		if closed {
			return dir + "/" + schemas.ArchiveLateDir, nil
		}
		return dir, nil
	})
	return late, err
}

// writeDeadLetters writes one NDJSON file of dead letters.
func writeDeadLetters(ctx context.Context, st store, name string, dead []schemas.DeadLetter) error {
	return st.write(ctx, DeadLetterDir, name, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for i := range dead {
			if err := enc.Encode(&dead[i]); err != nil {
				return err
			}
		}
		return nil
	}, nil)
}

// closeHour writes the hour's _CLOSED marker unless it exists, and reports
// whether it wrote it.
func closeHour(ctx context.Context, st store, hour time.Time, writer string, now time.Time) (bool, error) {
	closed, err := isClosed(ctx, st, hour)
	if err != nil || closed {
		return false, err
	}
	body := fmt.Sprintf("{\"hour\":%q,\"closed_at\":%q,\"writer\":%q}\n",
		hour.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339Nano), writer)
	return st.create(ctx, hourDir(hour)+"/"+schemas.ArchiveClosed, []byte(body))
}

// writeDurable writes name durably: a temporary file (".name.tmp-*") in dir,
// fsynced, renamed into final() (default dir), whose folder is then fsynced.
// Every folder it creates is fsynced into its parent.
func writeDurable(dir, name string, write func(io.Writer) error, final func() (string, error)) (err error) {
	if err := mkdirDurable(dir); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	dest := dir
	if final != nil {
		if dest, err = final(); err != nil {
			return fmt.Errorf("destination of %s: %w", name, err)
		}
		if err := mkdirDurable(dest); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, filepath.Join(dest, name)); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	if err := syncDir(dest); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	return nil
}

// mkdirDurable creates dir and its missing parents, fsyncing each new
// folder's parent so the folder itself survives a crash.
func mkdirDurable(dir string) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a folder", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("mkdir: %w", err)
	}
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	return nil
}

// syncDir fsyncs a folder, making the names in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// openHours lists the hours under root/events that have no marker.
func openHours(ctx context.Context, st store) ([]time.Time, error) {
	return markedHours(ctx, st, false)
}

// ClosedHours lists the event hours under root whose _CLOSED marker exists,
// in order: the hours the exact recount may count.
func ClosedHours(ctx context.Context, root string) ([]time.Time, error) {
	st, err := openRoot(root)
	if err != nil {
		return nil, fmt.Errorf("closed hours: %w", err)
	}
	return markedHours(ctx, st, true)
}

// markedHours lists, in order, the hours under root/events whose marker
// exists (closed) or does not (!closed).
func markedHours(ctx context.Context, st store, closed bool) ([]time.Time, error) {
	_, dirs, err := st.list(ctx, schemas.ArchiveEventsDir)
	if err != nil {
		return nil, fmt.Errorf("list hours: %w", err)
	}
	var out []time.Time
	for _, d := range dirs {
		h, err := schemas.ParseHourDir(d)
		if err != nil {
			continue // not ours
		}
		c, err := isClosed(ctx, st, h)
		if err != nil {
			return nil, fmt.Errorf("list hours: %w", err)
		}
		if c == closed {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out, nil
}

// ListHour lists an event hour's Parquet files, its own then its late ones
// (each sorted by name, temporary files skipped), and whether its _CLOSED
// marker exists. An hour with no folder has no files and is not closed.
// hour is truncated to the hour. The files are local paths under a local
// root, gs:// URLs under a gs:// root: OpenFile opens either.
func ListHour(root string, hour time.Time) (files []string, closed bool, err error) {
	return ListHourContext(context.Background(), root, hour)
}

// ListHourContext is ListHour with a context.
func ListHourContext(ctx context.Context, root string, hour time.Time) (files []string, closed bool, err error) {
	st, err := openRoot(root)
	if err != nil {
		return nil, false, fmt.Errorf("list hour: %w", err)
	}
	hour = hour.UTC().Truncate(time.Hour)
	dir := hourDir(hour)
	for _, d := range []string{dir, dir + "/" + schemas.ArchiveLateDir} {
		names, _, err := st.list(ctx, d)
		if err != nil {
			return nil, false, fmt.Errorf("list hour %s: %w", schemas.HourDir(hour), err)
		}
		for _, n := range names {
			if !strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".parquet") {
				files = append(files, st.addr(d+"/"+n))
			}
		}
	}
	closed, err = isClosed(ctx, st, hour)
	if err != nil {
		return nil, false, fmt.Errorf("list hour %s: %w", schemas.HourDir(hour), err)
	}
	return files, closed, nil
}

// ReadHour reads every row of an event hour: its own files and its late
// files, in ListHour's order. Rows are as archived, duplicates included.
func ReadHour(root string, hour time.Time) ([]schemas.ArchiveEvent, error) {
	ctx := context.Background()
	files, _, err := ListHourContext(ctx, root, hour)
	if err != nil {
		return nil, err
	}
	var out []schemas.ArchiveEvent
	for _, p := range files {
		rows, err := readParquet(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("read hour %s: %s: %w", schemas.HourDir(hour), path.Base(filepath.ToSlash(p)), err)
		}
		for i := range rows {
			rows[i].TS = rows[i].TS.UTC()
		}
		out = append(out, rows...)
	}
	return out, nil
}

// readParquet reads every row of one archive file.
func readParquet(ctx context.Context, p string) ([]schemas.ArchiveEvent, error) {
	f, err := OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parquet.Read[schemas.ArchiveEvent](f, f.Size())
}

// ReadDeadLetters reads every dead letter under root/deadletter, file by
// file in name order.
func ReadDeadLetters(root string) ([]schemas.DeadLetter, error) {
	ctx := context.Background()
	st, err := openRoot(root)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	names, _, err := st.list(ctx, DeadLetterDir)
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var out []schemas.DeadLetter
	for _, n := range names {
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".ndjson") {
			continue
		}
		f, err := st.open(ctx, DeadLetterDir+"/"+n)
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		dec := json.NewDecoder(io.NewSectionReader(f, 0, f.Size()))
		for dec.More() {
			var d schemas.DeadLetter
			if err := dec.Decode(&d); err != nil {
				f.Close()
				return nil, fmt.Errorf("read dead letters: %s: %w", n, err)
			}
			out = append(out, d)
		}
		f.Close()
	}
	return out, nil
}

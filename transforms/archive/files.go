package archive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/schemas"
)

// DeadLetterDir is the dead-letter folder under the archive root.
const DeadLetterDir = "deadletter"

// checkLocalRoot rejects roots this package cannot read or write yet.
func checkLocalRoot(root string) error {
	if root == "" {
		return errors.New("archive root is empty")
	}
	if strings.Contains(root, "://") {
		return fmt.Errorf("archive root %q: only local folders are supported (gs:// is not yet)", root)
	}
	return nil
}

// hourPath is the local folder of an event hour.
func hourPath(root string, hour time.Time) string {
	return filepath.FromSlash(schemas.ArchiveHourPath(root, hour))
}

// isClosed reports whether the hour's marker exists.
func isClosed(root string, hour time.Time) (bool, error) {
	_, err := os.Stat(filepath.Join(hourPath(root, hour), schemas.ArchiveClosed))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// writeHourFile writes rows as one Parquet file of hour: into the hour's own
// folder, or its late/ folder when the hour is closed at the moment of the
// rename. It reports whether the file went to late/.
func writeHourFile(root string, hour time.Time, name string, rows []schemas.ArchiveEvent) (late bool, err error) {
	dir := hourPath(root, hour)
	err = writeDurable(dir, name, func(w io.Writer) error {
		pw := parquet.NewGenericWriter[schemas.ArchiveEvent](w, parquet.Compression(&parquet.Zstd))
		if _, err := pw.Write(rows); err != nil {
			return fmt.Errorf("parquet write: %w", err)
		}
		if err := pw.Close(); err != nil {
			return fmt.Errorf("parquet close: %w", err)
		}
		return nil
	}, func() (string, error) {
		closed, err := isClosed(root, hour)
		if err != nil {
			return "", err
		}
		late = closed
		if closed {
			return filepath.Join(dir, schemas.ArchiveLateDir), nil
		}
		return dir, nil
	})
	return late, err
}

// writeDeadLetters writes one NDJSON file of dead letters.
func writeDeadLetters(root, name string, dead []schemas.DeadLetter) error {
	dir := filepath.Join(root, DeadLetterDir)
	return writeDurable(dir, name, func(w io.Writer) error {
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
func closeHour(root string, hour time.Time, writer string, now time.Time) (bool, error) {
	closed, err := isClosed(root, hour)
	if err != nil || closed {
		return false, err
	}
	body := fmt.Sprintf("{\"hour\":%q,\"closed_at\":%q,\"writer\":%q}\n",
		hour.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339Nano), writer)
	err = writeDurable(hourPath(root, hour), schemas.ArchiveClosed, func(w io.Writer) error {
		_, err := io.WriteString(w, body)
		return err
	}, nil)
	return err == nil, err
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
func openHours(root string) ([]time.Time, error) {
	entries, err := os.ReadDir(filepath.Join(root, schemas.ArchiveEventsDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list hours: %w", err)
	}
	var open []time.Time
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		h, err := schemas.ParseHourDir(e.Name())
		if err != nil {
			continue // not ours
		}
		closed, err := isClosed(root, h)
		if err != nil {
			return nil, fmt.Errorf("list hours: %w", err)
		}
		if !closed {
			open = append(open, h)
		}
	}
	return open, nil
}

// ListHour lists an event hour's Parquet files, its own then its late ones
// (each sorted by name, temporary files skipped), and whether its _CLOSED
// marker exists. An hour with no folder has no files and is not closed.
// hour is truncated to the hour.
func ListHour(root string, hour time.Time) (files []string, closed bool, err error) {
	if err := checkLocalRoot(root); err != nil {
		return nil, false, fmt.Errorf("list hour: %w", err)
	}
	hour = hour.UTC().Truncate(time.Hour)
	dir := hourPath(root, hour)
	for _, d := range []string{dir, filepath.Join(dir, schemas.ArchiveLateDir)} {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("list hour %s: %w", schemas.HourDir(hour), err)
		}
		for _, e := range entries {
			n := e.Name()
			if e.Type().IsRegular() && !strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".parquet") {
				files = append(files, filepath.Join(d, n))
			}
		}
	}
	closed, err = isClosed(root, hour)
	if err != nil {
		return nil, false, fmt.Errorf("list hour %s: %w", schemas.HourDir(hour), err)
	}
	return files, closed, nil
}

// ReadHour reads every row of an event hour: its own files and its late
// files, in ListHour's order. Rows are as archived, duplicates included.
func ReadHour(root string, hour time.Time) ([]schemas.ArchiveEvent, error) {
	files, _, err := ListHour(root, hour)
	if err != nil {
		return nil, err
	}
	var out []schemas.ArchiveEvent
	for _, f := range files {
		rows, err := parquet.ReadFile[schemas.ArchiveEvent](f)
		if err != nil {
			return nil, fmt.Errorf("read hour %s: %s: %w", schemas.HourDir(hour), filepath.Base(f), err)
		}
		for i := range rows {
			rows[i].TS = rows[i].TS.UTC()
		}
		out = append(out, rows...)
	}
	return out, nil
}

// ReadDeadLetters reads every dead letter under root/deadletter, file by
// file in name order.
func ReadDeadLetters(root string) ([]schemas.DeadLetter, error) {
	if err := checkLocalRoot(root); err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	dir := filepath.Join(root, DeadLetterDir)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read dead letters: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && !strings.HasPrefix(n, ".") && strings.HasSuffix(n, ".ndjson") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []schemas.DeadLetter
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("read dead letters: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		for dec.More() {
			var d schemas.DeadLetter
			if err := dec.Decode(&d); err != nil {
				return nil, fmt.Errorf("read dead letters: %s: %w", n, err)
			}
			out = append(out, d)
		}
	}
	return out, nil
}

package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
)

// GCSScheme starts an archive root (or file) in Google Cloud Storage:
// gs://bucket or gs://bucket/prefix.
const GCSScheme = "gs://"

// store is an archive root's files. Names are slash-separated and relative
// to the root ("events/hour=2026-11-30T10/part-a-000001.parquet"); every
// write returns only once the file is durable.
type store interface {
	// addr is name's address outside the package: a local path or a
	// gs:// URL.
	addr(name string) string
	// exists reports whether the file name exists.
	exists(ctx context.Context, name string) (bool, error)
	// list returns the base names of the files directly in dir, sorted,
	// and of the folders in it; a missing dir has neither.
	list(ctx context.Context, dir string) (files, dirs []string, err error)
	// write writes dir/name durably with the bytes fill writes. dest, when
	// set, picks the folder once the content is complete (default dir).
	write(ctx context.Context, dir, name string, fill func(io.Writer) error, dest func() (string, error)) error
	// create writes name durably unless it exists, and reports whether it
	// wrote it.
	create(ctx context.Context, name string, data []byte) (bool, error)
	// open opens name for reading.
	open(ctx context.Context, name string) (File, error)
}

// File is an archive file open for reading: random access and its size
// (what parquet.OpenFile needs).
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// openRoot is the store of an archive root: a local folder or
// gs://bucket[/prefix].
func openRoot(root string) (store, error) {
	switch {
	case root == "":
		return nil, errors.New("archive root is empty")
	case strings.HasPrefix(root, GCSScheme):
		bucket, prefix, err := parseGCS(root)
		if err != nil {
			return nil, err
		}
		return gcsRoot{bucket: bucket, prefix: prefix}, nil
	case strings.Contains(root, "://"):
		return nil, fmt.Errorf("archive root %q: only local folders and gs://bucket/prefix are supported", root)
	}
	return localRoot{dir: root}, nil
}

// openPath is the store holding one file (a local path or a gs:// URL)
// and the file's name in it.
func openPath(p string) (store, string, error) {
	if strings.HasPrefix(p, GCSScheme) {
		bucket, object, err := parseGCS(p)
		if err != nil {
			return nil, "", err
		}
		if object == "" {
			return nil, "", fmt.Errorf("%q names a bucket, not an object", p)
		}
		return gcsRoot{bucket: bucket}, object, nil
	}
	st, err := openRoot(filepath.Dir(p))
	return st, filepath.Base(p), err
}

// parseGCS splits gs://bucket/prefix; the prefix has no leading or
// trailing "/".
func parseGCS(u string) (bucket, prefix string, err error) {
	rest := strings.TrimPrefix(u, GCSScheme)
	bucket, prefix, _ = strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%q: want gs://bucket or gs://bucket/prefix", u)
	}
	return bucket, prefix, nil
}

// OpenFile opens one archive file, a local path or a gs:// URL as ListHour
// returns them, for reading. A local file is an *os.File; a Cloud Storage
// object is read by range requests.
func OpenFile(ctx context.Context, p string) (File, error) {
	st, name, err := openPath(p)
	if err != nil {
		return nil, err
	}
	return st.open(ctx, name)
}

// WriteFile writes a file at p, a local path or a gs:// URL, durably: a
// local file through a temporary file that is fsynced and renamed over p
// (its folder fsynced), an object once its upload has completed. Readers
// see the old file or the new one, never half.
func WriteFile(ctx context.Context, p string, fill func(io.Writer) error) error {
	st, name, err := openPath(p)
	if err != nil {
		return err
	}
	return st.write(ctx, "", name, fill, nil)
}

// ---- local folders ----

// localRoot is a local folder: temporary files, fsync and rename.
type localRoot struct{ dir string }

func (l localRoot) addr(name string) string {
	return filepath.Join(l.dir, filepath.FromSlash(name))
}

func (l localRoot) exists(_ context.Context, name string) (bool, error) {
	_, err := os.Stat(l.addr(name))
	return found(err, fs.ErrNotExist)
}

// found turns a lookup's error into whether the file exists: it does
// when err is nil, and does not when err is missing.
func found(err, missing error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, missing):
		return false, nil
	default:
		return false, err
	}
}

func (l localRoot) list(_ context.Context, dir string) (files, dirs []string, err error) {
	entries, err := os.ReadDir(l.addr(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		switch {
		case e.Type().IsRegular():
			files = append(files, e.Name())
		case e.IsDir():
			dirs = append(dirs, e.Name())
		}
	}
	return files, dirs, nil
}

func (l localRoot) write(_ context.Context, dir, name string, fill func(io.Writer) error, dest func() (string, error)) error {
	var final func() (string, error)
	if dest != nil {
		final = func() (string, error) {
			d, err := dest()
			return l.addr(d), err
		}
	}
	return writeDurable(l.addr(dir), name, fill, final)
}

// create checks, then writes: between two archivers on one folder the
// check is not atomic (the marker's content is the only difference).
func (l localRoot) create(ctx context.Context, name string, data []byte) (bool, error) {
	if ok, err := l.exists(ctx, name); err != nil || ok {
		return false, err
	}
	err := writeDurable(filepath.Dir(l.addr(name)), path.Base(name), func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, nil)
	return err == nil, err
}

func (l localRoot) open(_ context.Context, name string) (File, error) {
	f, err := os.Open(l.addr(name))
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return localFile{f, st.Size()}, nil
}

// localFile is an *os.File with its size.
type localFile struct {
	*os.File
	size int64
}

func (f localFile) Size() int64 { return f.size }

// ---- Google Cloud Storage ----

// gcsRoot is gs://bucket/prefix. An object is durable once its Writer's
// Close has returned; there are no folders, only name prefixes.
type gcsRoot struct{ bucket, prefix string }

// gcsShared is the process's Cloud Storage client, made on first use
// (Application Default Credentials, or STORAGE_EMULATOR_HOST's emulator).
var gcsShared struct {
	sync.Mutex
	c *storage.Client
}

func gcsClient(ctx context.Context) (*storage.Client, error) {
	gcsShared.Lock()
	defer gcsShared.Unlock()
	if gcsShared.c == nil {
		c, err := storage.NewClient(context.WithoutCancel(ctx))
		if err != nil {
			return nil, fmt.Errorf("cloud storage client: %w", err)
		}
		gcsShared.c = c
	}
	return gcsShared.c, nil
}

func (g gcsRoot) object(name string) string {
	if g.prefix == "" {
		return name
	}
	if name == "" {
		return g.prefix
	}
	return g.prefix + "/" + name
}

func (g gcsRoot) addr(name string) string {
	return GCSScheme + g.bucket + "/" + g.object(name)
}

func (g gcsRoot) handle(ctx context.Context, name string) (*storage.ObjectHandle, error) {
	c, err := gcsClient(ctx)
	if err != nil {
		return nil, err
	}
	return c.Bucket(g.bucket).Object(g.object(name)), nil
}

func (g gcsRoot) exists(ctx context.Context, name string) (bool, error) {
	o, err := g.handle(ctx, name)
	if err != nil {
		return false, err
	}
	_, err = o.Attrs(ctx)
	return found(err, storage.ErrObjectNotExist)
}

// list lists the objects and prefixes one "/" below dir.
func (g gcsRoot) list(ctx context.Context, dir string) (files, dirs []string, err error) {
	c, err := gcsClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	prefix := g.object(dir)
	if prefix != "" {
		prefix += "/"
	}
	it := c.Bucket(g.bucket).Objects(ctx, &storage.Query{Prefix: prefix, Delimiter: "/"})
	for {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		switch {
		case a.Prefix != "":
			dirs = append(dirs, strings.TrimSuffix(strings.TrimPrefix(a.Prefix, prefix), "/"))
		case a.Name != prefix: // not a folder placeholder
			files = append(files, strings.TrimPrefix(a.Name, prefix))
		}
	}
	slices.Sort(files)
	return files, dirs, nil
}

// write buffers the content, picks the destination, then uploads: the
// object exists, whole, once Close returns. The name is fixed and so is the
// content, so a retried upload is safe.
func (g gcsRoot) write(ctx context.Context, dir, name string, fill func(io.Writer) error, dest func() (string, error)) error {
	buf := &buffer{}
	if err := fill(buf); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if dest != nil {
		d, err := dest()
		if err != nil {
			return fmt.Errorf("destination of %s: %w", name, err)
		}
		dir = d
	}
	o, err := g.handle(ctx, path.Join(dir, name))
	if err != nil {
		return err
	}
	o = o.Retryer(storage.WithPolicy(storage.RetryAlways))
	if err := g.upload(ctx, o, buf.b); err != nil {
		return fmt.Errorf("upload %s: %w", g.addr(path.Join(dir, name)), err)
	}
	return nil
}

// create uploads name only if no object has that name (a DoesNotExist
// precondition), so of several archivers one writes the marker.
func (g gcsRoot) create(ctx context.Context, name string, data []byte) (bool, error) {
	o, err := g.handle(ctx, name)
	if err != nil {
		return false, err
	}
	err = g.upload(ctx, o.If(storage.Conditions{DoesNotExist: true}), data)
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusPreconditionFailed {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("upload %s: %w", g.addr(name), err)
	}
	return true, nil
}

func (g gcsRoot) upload(ctx context.Context, o *storage.ObjectHandle, data []byte) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := o.NewWriter(wctx)
	if _, err := w.Write(data); err != nil {
		cancel() // abandons the upload
		w.Close()
		return err
	}
	return w.Close()
}

func (g gcsRoot) open(ctx context.Context, name string) (File, error) {
	o, err := g.handle(ctx, name)
	if err != nil {
		return nil, err
	}
	a, err := o.Attrs(ctx)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", g.addr(name), err)
	}
	// Pin the generation read: a concurrent overwrite fails the reads
	// instead of mixing two versions.
	return &gcsFile{ctx: ctx, obj: o.Generation(a.Generation), name: g.addr(name), size: a.Size,
		blocks: map[int64][]byte{}}, nil
}

// buffer is a minimal growable io.Writer.
type buffer struct{ b []byte }

func (b *buffer) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }

// gcsFile reads an object by range requests of whole aligned blocks,
// keeping the last few: a Parquet reader's many small reads (a footer, a
// buffer per column) become a few requests.
type gcsFile struct {
	ctx  context.Context
	obj  *storage.ObjectHandle
	name string
	size int64

	mu     sync.Mutex
	blocks map[int64][]byte
	order  []int64 // blocks by age, oldest first
}

const (
	gcsBlockSize = 1 << 20
	gcsMaxBlocks = 16
)

func (f *gcsFile) Size() int64  { return f.size }
func (f *gcsFile) Close() error { f.mu.Lock(); f.blocks, f.order = nil, nil; f.mu.Unlock(); return nil }

func (f *gcsFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", f.name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for n < len(p) && off < f.size {
		b, err := f.block(off / gcsBlockSize)
		if err != nil {
			return n, err
		}
		c := copy(p[n:], b[off%gcsBlockSize:])
		n += c
		off += int64(c)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// block returns block i, from the cache or one range request.
func (f *gcsFile) block(i int64) ([]byte, error) {
	if b, ok := f.blocks[i]; ok {
		return b, nil
	}
	if f.blocks == nil {
		return nil, fmt.Errorf("read %s: file closed", f.name)
	}
	start := i * gcsBlockSize
	length := min(gcsBlockSize, f.size-start)
	r, err := f.obj.NewRangeReader(f.ctx, start, length)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.name, err)
	}
	b := make([]byte, length)
	_, err = io.ReadFull(r, b)
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.name, err)
	}
	if len(f.order) == gcsMaxBlocks {
		delete(f.blocks, f.order[0])
		f.order = f.order[1:]
	}
	f.blocks[i] = b
	f.order = append(f.order, i)
	return b, nil
}

// CheckRoot reports whether root is an archive root this package can use:
// a local folder, or gs://bucket[/prefix].
func CheckRoot(root string) error {
	_, err := openRoot(root)
	return err
}

// IsGCS reports whether root (or a file's address) is in Cloud Storage.
func IsGCS(root string) bool { return strings.HasPrefix(root, GCSScheme) }

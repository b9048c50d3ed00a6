// Package catalogue keeps the titles and thumbnails of topk's items, per
// (type, item), in Redis, for the serving binary to hydrate list entries
// with. The pipeline carries ids only; the catalogue is owned by whoever
// loads it (an admin endpoint taking NDJSON, a file at startup, or the local
// run filling its synthetic items). An item missing from the catalogue is
// served with its id alone. It imports go-redis and schemas only.
//
// # Redis layout
//
// With the default prefix "topk":
//
//	topk:item:{type}:{item}   hash   "title" -> text, "thumbnail" -> URL
//	channel topk:catalogue    pub/sub the type, once per Put batch
//
// One hash per item keeps a lookup of a list's 1,000 items one pipelined
// round trip of HMGETs, and lets items be added, replaced or expired one by
// one. An empty field is deleted, so loading {"title":""} clears a title.
//
// # NDJSON
//
// One record per line, as Load and the admin endpoint read it:
//
//	{"type":"video","item":"v_42","title":"Cat plays piano","thumbnail":"https://img.example/v_42.jpg"}
package catalogue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
)

// Bounds on a record's fields.
const (
	MaxTitleLen     = 512
	MaxThumbnailLen = 2048
	// batch is how many records one pipelined write carries.
	batch = 500
	// maxLine bounds one NDJSON line.
	maxLine = 8 << 10
)

// ErrBadRecord wraps every validation error of a record.
var ErrBadRecord = errors.New("bad catalogue record")

// Entry is what the catalogue knows of one item.
type Entry struct {
	Title     string `json:"title,omitempty"`
	Thumbnail string `json:"thumbnail,omitempty"`
}

// Record is one catalogue line: an item and its entry.
type Record struct {
	Type string `json:"type"`
	Item string `json:"item"`
	Entry
}

// Options configures a Store. The zero value is the production layout.
type Options struct {
	// Prefix starts every key and the channel. Zero: "topk".
	Prefix string
	// Channel carries a type per Put. Zero: Prefix + ":catalogue".
	Channel string
}

// Store reads and writes the catalogue in one Redis. Safe for concurrent use.
type Store struct {
	c    redis.UniversalClient
	opts Options
}

// New returns a Store on c.
func New(c redis.UniversalClient, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "topk"
	}
	if opts.Channel == "" {
		opts.Channel = opts.Prefix + ":catalogue"
	}
	return &Store{c: c, opts: opts}
}

// Channel is the pub/sub channel announcing catalogue changes.
func (st *Store) Channel() string { return st.opts.Channel }

// Key is the Redis hash of (typ, item).
func (st *Store) Key(typ, item string) string { return st.opts.Prefix + ":item:" + typ + ":" + item }

// Validate checks a record: the type and item follow the event rules
// (schemas.IsType, a printable-ASCII item of at most schemas.MaxItemLen
// bytes), the title is UTF-8 without control characters of at most
// MaxTitleLen bytes, the thumbnail an http(s) URL of at most MaxThumbnailLen
// bytes, or a data:image/ URL.
func Validate(r Record) error {
	if !schemas.IsType(r.Type) {
		return fmt.Errorf("%w: type %q must match [a-z][a-z0-9_]{0,31}", ErrBadRecord, r.Type)
	}
	if r.Item == "" || len(r.Item) > schemas.MaxItemLen {
		return fmt.Errorf("%w: item must be 1 to %d bytes", ErrBadRecord, schemas.MaxItemLen)
	}
	for i := 0; i < len(r.Item); i++ {
		if c := r.Item[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: item %q must be printable ASCII without spaces", ErrBadRecord, r.Item)
		}
	}
	if len(r.Title) > MaxTitleLen || !utf8.ValidString(r.Title) {
		return fmt.Errorf("%w: title must be UTF-8 of at most %d bytes", ErrBadRecord, MaxTitleLen)
	}
	if strings.IndexFunc(r.Title, unicode.IsControl) >= 0 {
		return fmt.Errorf("%w: title has a control character", ErrBadRecord)
	}
	if t := r.Thumbnail; t != "" {
		if len(t) > MaxThumbnailLen {
			return fmt.Errorf("%w: thumbnail is %d bytes, more than %d", ErrBadRecord, len(t), MaxThumbnailLen)
		}
		if !strings.HasPrefix(t, "https://") && !strings.HasPrefix(t, "http://") && !strings.HasPrefix(t, "data:image/") {
			return fmt.Errorf("%w: thumbnail must be an http(s) or data:image/ URL", ErrBadRecord)
		}
		if strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r == '"' || r == '\'' || r == '<' || r == '>' || r > '~' }) {
			return fmt.Errorf("%w: thumbnail has spaces, quotes or non-ASCII bytes", ErrBadRecord)
		}
	}
	return nil
}

// Put validates every record, then writes them in pipelined batches and
// announces each type written on Options.Channel. Nothing is written when a
// record is invalid. A record with both fields empty deletes the item.
func (st *Store) Put(ctx context.Context, recs []Record) error {
	types := map[string]bool{}
	if err := st.put(ctx, recs, types); err != nil {
		return err
	}
	return st.announce(ctx, types)
}

// put validates and writes recs, adding their types to types.
func (st *Store) put(ctx context.Context, recs []Record, types map[string]bool) error {
	for i, r := range recs {
		if err := Validate(r); err != nil {
			return fmt.Errorf("record %d: %w", i, err)
		}
	}
	for start := 0; start < len(recs); start += batch {
		part := recs[start:min(start+batch, len(recs))]
		_, err := st.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range part {
				types[r.Type] = true
				k := st.Key(r.Type, r.Item)
				set := map[string]any{}
				var del []string
				for _, f := range [][2]string{{"title", r.Title}, {"thumbnail", r.Thumbnail}} {
					if f[1] == "" {
						del = append(del, f[0])
					} else {
						set[f[0]] = f[1]
					}
				}
				if len(del) > 0 {
					p.HDel(ctx, k, del...)
				}
				if len(set) > 0 {
					p.HSet(ctx, k, set)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("catalogue put: %w", err)
		}
	}
	return nil
}

// announce publishes each type on Options.Channel.
func (st *Store) announce(ctx context.Context, types map[string]bool) error {
	for t := range types {
		if err := st.c.Publish(ctx, st.opts.Channel, t).Err(); err != nil {
			return fmt.Errorf("catalogue: announce %s: %w", t, err)
		}
	}
	return nil
}

// Get returns the entries of typ's items that the catalogue knows, in one
// pipelined round trip; items it does not know are absent from the map.
func (st *Store) Get(ctx context.Context, typ string, items []string) (map[string]Entry, error) {
	out := make(map[string]Entry)
	if len(items) == 0 {
		return out, nil
	}
	cmds := make([]*redis.SliceCmd, len(items))
	_, err := st.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			cmds[i] = p.HMGet(ctx, st.Key(typ, it), "title", "thumbnail")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalogue get %s: %w", typ, err)
	}
	for i, c := range cmds {
		v := c.Val()
		var e Entry
		if len(v) == 2 {
			e.Title, _ = v[0].(string)
			e.Thumbnail, _ = v[1].(string)
		}
		if e != (Entry{}) {
			out[items[i]] = e
		}
	}
	return out, nil
}

// Subscribe reports the type of every catalogue change until ctx is done,
// when the channel is closed. Messages can be lost across a reconnect.
func (st *Store) Subscribe(ctx context.Context) (<-chan string, error) {
	ps := st.c.Subscribe(ctx, st.opts.Channel)
	if _, err := ps.Receive(ctx); err != nil {
		ps.Close()
		return nil, fmt.Errorf("subscribe %s: %w", st.opts.Channel, err)
	}
	out := make(chan string, 16)
	in := ps.Channel()
	go func() {
		defer close(out)
		defer ps.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- m.Payload:
				default: // a burst: one pending message per type is enough
				}
			}
		}
	}()
	return out, nil
}

// Load reads NDJSON records from r (blank lines skipped) and writes them in
// batches, then announces each type written once. It stops at the first bad
// line, naming it; the batches before it are written (and announced). It
// returns the records written.
func (st *Store) Load(ctx context.Context, r io.Reader) (n int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var recs []Record
	line := 0
	types := map[string]bool{}
	defer func() {
		if aerr := st.announce(ctx, types); aerr != nil && err == nil {
			err = aerr
		}
	}()
	flush := func() error {
		if err := st.put(ctx, recs, types); err != nil {
			return err
		}
		n += len(recs)
		recs = recs[:0]
		return nil
	}
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec Record
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return n, fmt.Errorf("%w: line %d: %v", ErrBadRecord, line, err)
		}
		if dec.More() {
			return n, fmt.Errorf("%w: line %d: data after the object", ErrBadRecord, line)
		}
		if err := Validate(rec); err != nil {
			return n, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
		if len(recs) == batch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("%w: line %d: %v", ErrBadRecord, line+1, err)
	}
	if len(recs) > 0 {
		if err := flush(); err != nil {
			return n, err
		}
	}
	return n, nil
}

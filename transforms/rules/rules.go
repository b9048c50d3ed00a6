package rules

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/topk-dev/topk/schemas"
)

// Reason says why an event does or does not count.
type Reason uint8

// Reasons, in the order the rules are applied.
const (
	OK        Reason = iota // counts
	Duplicate               // its event_id was seen before
	Blocked                 // its item is on the safety blocklist
	Bot                     // its user (or, at ingest, its user agent) is a known bot
	Repeat                  // same user and item less than the repeat gap after the previous
	Capped                  // its account already counted the cap for this item in this window
	NumReasons
)

var reasonNames = [NumReasons]string{"ok", "duplicate", "blocked", "bot", "repeat", "capped"}

// String is the reason's metric label.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Rules is the stateless part of the rule set (blocklist, bots, trust) and
// the loaded files it comes from. It is safe for concurrent use; Reload
// swaps in newly read files atomically, and a check sees the old set or the
// new one, never half of each.
type Rules struct {
	cfg  Config
	snap atomic.Pointer[snapshot]
	mu   sync.Mutex // serialises Reload
}

// snapshot is one immutable reading of the files.
type snapshot struct {
	// users maps a user to its trust weight, or to botWeight for a bot:
	// one lookup per event for both rules.
	users   map[string]float32
	agents  *regexp.Regexp      // nil: no pattern
	blocked map[string][]string // item -> its blocked types ("*": all)
	version string
	stamps  [3]fileStamp
}

// fileStamp is what Watch compares to notice a changed file.
type fileStamp struct {
	size int64
	mod  time.Time
}

// New validates cfg and reads its files.
func New(cfg Config) (*Rules, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Rules{cfg: cfg}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Config is the configuration r was built from.
func (r *Rules) Config() Config { return r.cfg }

// Version names the rule set: the rules' parameters and a hash of each
// file's content. Lists carry it as `rules` and recounts log it, so that two
// counts are compared only when they applied the same definition. It
// changes when a reload reads different content.
func (r *Rules) Version() string { return r.snap.Load().version }

// Check applies the stateless rules (blocklist, bots) to e and returns its
// trust weight when it counts (reason OK), 0 otherwise. With --rules=none
// every event counts with weight 1.
//
// hot path: once per event; no allocation.
func (r *Rules) Check(e *schemas.Event) (weight float64, reason Reason) {
	if r.cfg.Off {
		return 1, OK
	}
	return r.snap.Load().check(e, r.cfg.TrustUnknown)
}

// botWeight marks a bot in snapshot.users.
const botWeight = -1

func (s *snapshot) check(e *schemas.Event, unknown float64) (float64, Reason) {
	if types, ok := s.blocked[e.Item]; ok {
		for _, t := range types {
			if t == e.Type || t == "*" {
				return 0, Blocked
			}
		}
	}
	if e.User == "" {
		return unknown, OK
	}
	if w, ok := s.users[e.User]; ok {
		if w == botWeight {
			return 0, Bot
		}
		return float64(w), OK
	}
	return unknown, OK
}

// BotAgent reports whether a user agent matches a known bot's pattern. The
// user agent is known only at ingest (events do not carry it), so this rule
// is applied there, once per request; false with --rules=none.
func (r *Rules) BotAgent(ua string) bool {
	if r.cfg.Off {
		return false
	}
	re := r.snap.Load().agents
	return re != nil && re.MatchString(ua)
}

// Reload reads the files again and swaps them in. On error the rules in
// force stay as they were.
func (r *Rules) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, err := load(r.cfg)
	if err != nil {
		return err
	}
	r.snap.Store(s)
	return nil
}

// Watch reloads the files whenever one of them changes (size or
// modification time), checking every cfg.Reload, until ctx ends. Reload
// errors go to onErr (nil: dropped) and the old rules stay in force.
func (r *Rules) Watch(ctx context.Context, onErr func(error)) {
	if r.cfg.Reload <= 0 {
		return
	}
	t := time.NewTicker(r.cfg.Reload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if stampFiles(r.cfg) == r.snap.Load().stamps {
			continue
		}
		if err := r.Reload(); err != nil && onErr != nil {
			onErr(err)
		}
	}
}

func stampFiles(cfg Config) [3]fileStamp {
	var st [3]fileStamp
	for i, p := range [3]string{cfg.Bots, cfg.Blocklist, cfg.Trust} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			st[i] = fileStamp{fi.Size(), fi.ModTime()}
		}
	}
	return st
}

// ErrFile is wrapped by errors in the rule files' content.
var ErrFile = errors.New("rules: bad file")

// load reads every file of cfg into a new snapshot.
func load(cfg Config) (*snapshot, error) {
	s := &snapshot{stamps: stampFiles(cfg), users: map[string]float32{}, blocked: map[string][]string{}}
	var hashes [3]string
	for _, f := range []struct {
		path  string
		parse func(*snapshot, []byte) error
		at    int // index in hashes
	}{{cfg.Trust, parseTrust, 2}, {cfg.Blocklist, parseBlocklist, 1}, {cfg.Bots, parseBots, 0}} {
		hashes[f.at] = "-"
		if f.path == "" || cfg.Off {
			continue
		}
		data, err := os.ReadFile(f.path)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		if err := f.parse(s, data); err != nil {
			return nil, fmt.Errorf("%s: %w", f.path, err)
		}
		hashes[f.at] = fmt.Sprintf("%08x", uint32(xxhash.Sum64(data)))
	}
	if cfg.Off {
		s.version = "r1;none"
		return s, nil
	}
	s.version = fmt.Sprintf("r1;repeat=%s;cap=%d/%s;bots=%s;blocklist=%s;trust=%s/%s",
		cfg.RepeatGap, cfg.Cap, cfg.Window, hashes[0], hashes[1], hashes[2],
		strconv.FormatFloat(cfg.TrustUnknown, 'g', -1, 64))
	return s, nil
}

// lines calls fn with every line of data that is not blank or a # comment,
// trimmed, and its 1-based number.
func lines(data []byte, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%w: line %d: %w", ErrFile, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrFile, err)
	}
	return nil
}

// parseBots reads user ids (a line, or user:ID) and user-agent regular
// expressions (ua:REGEXP, matched case-insensitively anywhere in the
// user agent).
// Bots are read after the trust table: a bot in both is a bot.
func parseBots(s *snapshot, data []byte) error {
	var pats []string
	err := lines(data, func(_ int, line string) error {
		switch {
		case strings.HasPrefix(line, "ua:"):
			p := strings.TrimSpace(line[3:])
			if _, err := regexp.Compile(p); err != nil || p == "" {
				return fmt.Errorf("user-agent pattern %q: %v", p, err)
			}
			pats = append(pats, "(?:"+p+")")
		default:
			u := strings.TrimPrefix(line, "user:")
			if err := checkID("user", u, schemas.MaxUserLen); err != nil {
				return err
			}
			s.users[u] = botWeight
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(pats) > 0 {
		s.agents = regexp.MustCompile("(?i)" + strings.Join(pats, "|"))
	}
	return nil
}

// parseBlocklist reads type,item rows; type * blocks the item in every type.
func parseBlocklist(s *snapshot, data []byte) error {
	return lines(data, func(_ int, line string) error {
		typ, item, ok := strings.Cut(line, ",")
		typ, item = strings.TrimSpace(typ), strings.TrimSpace(item)
		if !ok || (typ != "*" && !schemas.IsType(typ)) {
			return fmt.Errorf("want type,item (type * for any), got %q", line)
		}
		if err := checkID("item", item, schemas.MaxItemLen); err != nil {
			return err
		}
		s.blocked[item] = append(s.blocked[item], typ)
		return nil
	})
}

// parseTrust reads user,weight rows with weights in [0,1]; a first line
// "user,weight" is a header.
func parseTrust(s *snapshot, data []byte) error {
	first := true
	return lines(data, func(_ int, line string) error {
		u, w, ok := strings.Cut(line, ",")
		u, w = strings.TrimSpace(u), strings.TrimSpace(w)
		if first && u == "user" && w == "weight" {
			first = false
			return nil
		}
		first = false
		if !ok {
			return fmt.Errorf("want user,weight, got %q", line)
		}
		if err := checkID("user", u, schemas.MaxUserLen); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(w, 64)
		if err != nil || f < 0 || f > 1 || f != f {
			return fmt.Errorf("weight %q of %s is not a number in [0, 1]", w, u)
		}
		s.users[u] = float32(f)
		return nil
	})
}

// checkID applies the event field rules to an id read from a file.
func checkID(field, s string, maxLen int) error {
	if s == "" || len(s) > maxLen {
		return fmt.Errorf("%s %q: empty or longer than %d bytes", field, s, maxLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Errorf("%s %q: byte 0x%02x is not printable ASCII without space, quote or backslash", field, s, c)
		}
	}
	return nil
}

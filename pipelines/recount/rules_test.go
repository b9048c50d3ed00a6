package recount

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/parquet-go/parquet-go"

	"github.com/topk-dev/topk/pipelines/recount/recounttest"
	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/rules"
)

// rulesOracle applies the rule definition (package doc of transforms/rules)
// with plain maps and sorting, independently of the pipeline and of
// rules.Judge: duplicates by event_id, then blocklisted items and bot
// users, then per (user, type, item, rule window) in order of (event time,
// event_id hash) repeats (less than gap after the previous event) and the
// cap. It returns the counted events.
func rulesOracle(cfg rules.Config, blocked, bots map[string]bool, events []schemas.Event) []schemas.Event {
	seen := map[string]bool{}
	groups := map[string][]schemas.Event{}
	var out []schemas.Event
	for _, e := range events {
		if seen[e.EventID] {
			continue
		}
		seen[e.EventID] = true
		if cfg.Off {
			out = append(out, e)
			continue
		}
		if blocked[e.Type+","+e.Item] || bots[e.User] {
			continue
		}
		if e.User == "" {
			out = append(out, e)
			continue
		}
		k := fmt.Sprintf("%s|%s|%s|%d", e.User, e.Type, e.Item, e.TS.UnixMilli()/cfg.Window.Milliseconds())
		groups[k] = append(groups[k], e)
	}
	for _, g := range groups {
		slices.SortFunc(g, func(a, b schemas.Event) int {
			if c := a.TS.Compare(b.TS); c != 0 {
				return c
			}
			return cmpInt(rules.IDHash(a.EventID), rules.IDHash(b.EventID))
		})
		n := 0
		for i, e := range g {
			if i > 0 && cfg.RepeatGap > 0 && e.TS.Sub(g[i-1].TS) < cfg.RepeatGap {
				continue
			}
			if cfg.Cap > 0 && n >= cfg.Cap {
				continue
			}
			n++
			out = append(out, e)
		}
	}
	return out
}

// ruleEvents is an hour of organic events plus one account posting one
// item 500 times, blocklisted items and bot users.
func ruleEvents() []schemas.Event {
	evs := recounttest.GenEvents(21, hour0, 6000)
	for i := range evs {
		if i%97 == 0 {
			evs[i].User = "" // anonymous: no account rules
		}
	}
	for p := range 500 {
		evs = append(evs, schemas.Event{EventID: fmt.Sprintf("spam-%d", p), Type: "hashtag", Item: "it_spam", User: "u_spammer",
			TS: hour0.Add(time.Duration(p) * 7 * time.Second), Country: "IN", Region: "IN-MH"})
	}
	return evs
}

func writeRuleFiles(t *testing.T) (bots, block string, botSet, blockSet map[string]bool) {
	dir := t.TempDir()
	bots, block = filepath.Join(dir, "bots"), filepath.Join(dir, "blocklist")
	must(t, os.WriteFile(bots, []byte("u7\nu13\nua:crawler\n"), 0o644))
	must(t, os.WriteFile(block, []byte("video,it_2\nhashtag,it_5\n"), 0o644))
	return bots, block, map[string]bool{"u7": true, "u13": true}, map[string]bool{"video,it_2": true, "hashtag,it_5": true}
}

// Property (issue 12): the exact recount applies the same rules as the
// definition (blocklist, bots, repeats, cap) for every shard, partition,
// reader and wave layout; every event sent twice (same event_id, another
// file) changes no count; --rules=none counts what a plain recount does.
func TestBuildAppliesRules(t *testing.T) {
	events := ruleEvents()
	bots, block, botSet, blockSet := writeRuleFiles(t)
	dir := schemas.ArchiveHourPath(t.TempDir(), hour0)
	must(t, os.MkdirAll(dir, 0o755))
	var a, b []schemas.ArchiveEvent
	for i := range events {
		row := schemas.ArchiveEventOf(&events[i])
		a = append(a, row)
		b = append(b, row) // every event twice: the second copy in another file
	}
	slices.Reverse(b)
	files := []string{filepath.Join(dir, "part-a.parquet"), filepath.Join(dir, "part-b.parquet")}
	must(t, parquet.WriteFile(files[0], a))
	must(t, parquet.WriteFile(files[1], b))

	all := rules.DefaultConfig()
	all.Bots, all.Blocklist = bots, block
	noRepeat := all
	noRepeat.RepeatGap = 0
	quarter := all
	quarter.Window, quarter.Cap = 15*time.Minute, 2
	for _, c := range []struct {
		name                         string
		cfg                          rules.Config
		shards, parts, readers, wave int
	}{
		{"all", all, 1, 1, 1, 1},
		{"all_sharded", all, 4, 3, 2, 2},
		{"no_repeat", noRepeat, 3, 2, 2, 1},
		{"window15m_cap2", quarter, 2, 2, 1, 2},
		{"none", rules.None(), 3, 2, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := recounttest.Oracle(rulesOracle(c.cfg, blockSet, botSet, events))
			staging := t.TempDir()
			p, s := beam.NewPipelineWithRoot()
			cfg := c.cfg
			Build(s, HourJob{Hour: hour0, Files: files, Staging: staging, Shards: c.shards, Parts: c.parts,
				Readers: c.readers, Waves: c.wave, Rules: &cfg})
			m, err := BeamRunner(context.Background(), p)
			must(t, err)
			got, err := readCounts(staging)
			must(t, err)
			g := recounttest.AsMap(got)
			if !maps.Equal(g, want) {
				for k, v := range want {
					if g[k] != v {
						t.Errorf("%s: %d, want %d", k, g[k], v)
					}
				}
				t.Fatalf("counts differ from the definition: %d keys, want %d", len(g), len(want))
			}
			if spam := g["hashtag/global/it_spam"]; !c.cfg.Off && spam > int64(c.cfg.Cap)*int64(time.Hour/c.cfg.Window) {
				t.Fatalf("one account posting 500 times counted %d", spam)
			}
			if c.cfg.Off && g["hashtag/global/it_spam"] != 500 {
				t.Fatalf("--rules=none: the account's 500 posts counted %d", g["hashtag/global/it_spam"])
			}
			t.Logf("metrics %v", m)
		})
	}
	// Plain recount (no Rules at all) equals --rules=none.
	staging := t.TempDir()
	p, s := beam.NewPipelineWithRoot()
	Build(s, HourJob{Hour: hour0, Files: files, Staging: staging, Shards: 2, Parts: 2, Readers: 1, Waves: 1})
	_, err := BeamRunner(context.Background(), p)
	must(t, err)
	got, err := readCounts(staging)
	must(t, err)
	if !maps.Equal(recounttest.AsMap(got), recounttest.Oracle(events)) {
		t.Fatal("a recount without rules is not a plain count")
	}
}

// Property: Run reports (and logs) the rules version each hour was counted
// with, "r1;none" without rules, and its exact_duplicates_dropped leaves
// out what the rules dropped; bad rule files fail the run before any job.
func TestRunReportsRulesVersion(t *testing.T) {
	root := t.TempDir()
	events := ruleEvents()
	recounttest.WriteArchive(t, root, hour0, events)
	bots, block, _, _ := writeRuleFiles(t)
	cfg := rules.DefaultConfig()
	cfg.Bots, cfg.Blocklist = bots, block
	r, err := rules.New(cfg)
	must(t, err)
	for _, c := range []struct {
		rules *rules.Config
		want  string
	}{{nil, "r1;none"}, {&cfg, r.Version()}} {
		reps, err := Run(context.Background(), Config{Archive: root, Hours: []time.Time{hour0}, K: 10, Shards: 2, Parts: 2,
			ParquetOnly: true, Rules: c.rules})
		must(t, err)
		if len(reps) != 1 || reps[0].Rules != c.want {
			t.Fatalf("reports %+v, want rules %q", reps, c.want)
		}
		m := reps[0].Metrics
		dropped := m["exact_rules_blocked"] + m["exact_rules_bot"] + m["exact_rules_repeat"] + m["exact_rules_capped"]
		if c.rules != nil && dropped == 0 {
			t.Fatalf("no event dropped by the rules: %v", m)
		}
		// Copies of an event the blocklist or a bot rule drops are dropped
		// (and counted) by that rule at read, before the dedupe.
		dups := int64((len(events) + 6) / 7)
		stateless := m["exact_rules_blocked"] + m["exact_rules_bot"]
		if got := m["exact_duplicates_dropped"]; got > dups || got < dups-stateless || (c.rules == nil && got != dups) {
			t.Fatalf("duplicates %d, want %d less at most the %d stateless drops (metrics %v)", got, dups, stateless, m)
		}
	}
	bad := cfg
	bad.Trust = writeBad(t)
	if _, err := Run(context.Background(), Config{Archive: root, Hours: []time.Time{hour0}, K: 10, Shards: 2, Parts: 2,
		ParquetOnly: true, Rules: &bad}); err == nil {
		t.Fatal("a bad trust file did not fail the run")
	}
}

func writeBad(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "trust")
	must(t, os.WriteFile(p, []byte("u1,7\n"), 0o644))
	return p
}

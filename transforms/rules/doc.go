// Package rules is topk's one definition of a countable event, used by the
// ingest API (serving/api), the exact recount (pipelines/recount) and the
// streaming pre-aggregation, so that the fast and exact paths can differ by
// approximation and lateness, never by definition ("one definition, two
// runtimes": seeds/top-k-trending.txt). It has no Beam import.
//
// # The rules, in the order they apply
//
//  1. Duplicates: an event whose event_id was seen before does not count.
//     Always on, even with --rules=none.
//  2. Safety blocklist (--blocklist): events of a blocklisted item are
//     dropped before counting (and the API still filters lists at serve time).
//  3. Known bots (--bots): events of a bot user id are dropped; a request
//     whose User-Agent matches a bot pattern is dropped at ingest, the only
//     place the user agent is known (events do not carry it).
//  4. Repeats (--repeat_gap, default 30 s): an event of a (user, type, item)
//     less than the gap after the key's previous event in the same rule
//     window (counted or not) is a repeat and does not count. A user
//     watching on and on counts once, until a pause of the gap.
//  5. Cap (--cap, default 10): one account counts at most cap events per
//     (type, item) per rule window (--rules_window, default 1 h: fixed
//     event-time windows that divide an hour, so the recount judges every
//     hour on its own). A list window of length L holds at most
//     cap * (ceil(L / window) + 1) of one account's events for an item.
//  6. Trust (--trust, --trust_unknown): a counting event carries its user's
//     weight in [0,1] from a `user,weight` table (users not in it, and
//     events without a user, weigh --trust_unknown, default 1). Counts add
//     1 per counting event; the weight is for trust-weighted scores
//     (trending, distinct trusted users), so a new or low-reputation
//     account adds less there.
//
// Events without a user have no account: rules 3-5 do not apply to them.
// --rules=none turns off rules 2-6 (every event that is not a duplicate
// counts, with weight 1), so that a raw stream can be checked against a
// plain recount. Rules.Version names the rule set (parameters and a hash
// of each file), for lists (`rules`) and recount logs.
//
// # Files
//
// Bots: one user id per line (or user:ID), and ua:REGEXP lines, RE2
// regular expressions matched case-insensitively anywhere in a user agent.
// Blocklist: type,item per line, type * for every type. Trust: user,weight
// per line, an optional user,weight header. Blank lines and # comments are
// ignored everywhere. Rules.Watch reloads the files when one changes (every
// --rules_reload, default 30 s); a file that fails to parse leaves the rules
// in force as they were. Rules.Reload does it at once (on SIGHUP, say).
//
// # API
//
// Rules holds the stateless rules (2, 3, 6) and is safe for concurrent use.
// Filter adds the event_id dedupe and the repeat and cap rules, with memory
// across events; one per goroutine:
//
//	r, err := rules.New(cfg)  // cfg from RegisterFlags, Validate'd by New
//	f := r.NewFilter()        // in a DoFn's Setup
//	f.Advance(elementTime)    // once per beacon: guards against future-dated events
//	w, why := f.Check(&e)     // hot path: once per event, no allocation
//	if why == rules.OK { count += 1; trending += w }
//	st := f.TakeStats()       // in FinishBundle: counters by reason
//
// The exact recount needs no Filter: it drops duplicates by grouping on
// event_id, calls Rules.Check, and runs Judge.Step on each (user, type,
// item, window)'s events in the canonical order (event time in ms, then
// IDHash). That is the definition.
//
// # Memory, and why the stream never under-counts
//
// A Filter's state is a ring of exact event_id sets, one per DedupeBucket
// of event time over DedupeHorizon (plus one), and a ring of (user, type,
// item) tables, one per rule window over the horizon (plus one). Each is a
// table of at most MaxIDs or MaxKeys exact keys with a fixed arena: keys
// are compared byte for byte, so an event is never taken for another (no
// false drop: the false-drop rate is zero). A table that is full does not
// grow: an event it cannot remember counts (Stats.Unchecked for event_ids,
// Stats.Untracked for keys), which can only over-count, by at most that
// many events, and a table's memory is reused when event time moves its
// slot to a new bucket or window. A rule window's keys are kept in two
// generations of MaxKeys/2 (keyWindow): when the newer is full the older
// is dropped, so the keys kept are the recently active ones and a long
// tail of one-off keys (or a spam wave of junk ones) ages out rather than
// switching the repeat and cap rules off for the rest of the hour; a
// dropped key that comes back starts afresh (Stats.Forgotten: at most Cap
// more events per forgotten key, again an over-count only). So a Filter's memory is at most
// Filter.MaxBytes whatever the events (187 MiB at the defaults: 7 sets of
// 2^18 event_ids, 2 tables of 2^17 keys; a
// spam wave of a million junk keys or accounts fills tables, it does not
// grow them), and Rules' memory is the files' size.
//
// A Filter judges events in arrival order and sees only the events sent
// to it. It never drops an event the definition counts, as long as it is
// the only Filter for the event_ids and accounts it sees: it calls an event
// a duplicate only on an exact event_id match; a repeat only when an event
// it has seen precedes it, in canonical order, by less than the gap (then
// the definition's own predecessor is at least as close); and at most cap
// events per key are let through by each Filter. Out-of-order arrival
// lets more through (a key keeps its 4 latest events; an event arriving
// after all of them is not judged a repeat), so the stream can only
// over-count against the exact recount.
// Where events of one account or event_id reach several Filters (preagg
// workers), each applies the rules to its share: duplicates that land on
// different workers count twice, and a key can count up to cap per
// worker: again only over-counts. Exact per-account rules in the stream
// need events routed by user (or event_id) before the Filter. One
// exception: when caps bite on out-of-order events, the stream may keep
// different (later) events of a key than the recount does (the same number
// or more in the rule window), so a count over part of a rule window can
// be lower than the recount's, by at most the cap per account whose cap
// bit, while the whole rule window holds as many or more.
//
// A second exception, on a runner that retries: a Filter's memory is its
// DoFn instance's, not Beam state. The Go SDK drops an instance whose
// bundle failed in the SDK, so its retry meets a new Filter; but when a
// runner discards a bundle the SDK finished (Dataflow, on a failed commit:
// a record may then go through a transform more than once) and retries
// it on the same instance, the Filter has seen the bundle's event_ids and
// keys. Telling that retry from a duplicate needs to know whether the
// first bundle committed, which a DoFn is not told (bundle finalization is
// lost after a plan's first bundle in the Go SDK: see transforms/source),
// or a delivery identity the source keeps unique. The beacon is that
// identity where the source delivers each beacon_id once (Dataflow's
// native Pub/Sub read deduplicates by the beacon_id attribute; so does the
// recovery log on the other runners): with Filter.RetriesByBeacon, which
// the fast path turns on there (preagg.Config.BeaconsOnce), each
// remembered event_id keeps the beacon and the delivery that brought it
// and the verdict it got, and the same event in a later delivery of the
// same beacon gets that verdict again without changing any state
// (Stats.Redelivered), so the retried bundle counts what the discarded
// one would have; in another beacon it is a duplicate, as before. The
// retry meets what the discarded bundle left in the key tables (the key's
// latest events, its count towards the cap) only through those verdicts.
// (A message id would not do: a message whose bundle was discarded comes
// again with the same id, as does one whose bundle committed but whose ack
// came too late, which must not count again.) Where the source may deliver
// a beacon twice (a file, a subscription read without the log) the option
// is off and a retried bundle on the same instance is under-counted; no
// runner here retries one (Prism ends the job on a failed bundle).
package rules

// Package trend scores "trending now" for one list (type, scope): which items
// are unusually active for themselves right now, not simply big. It is plain
// Go with no Beam import; transforms/trend/trendbeam wraps it in a stateful
// DoFn keyed by list.
//
// # The score
//
// The score is Instagram's popularity times novelty ("Trending on
// Instagram", Instagram Engineering, 2015; seeds/top-k-trending.txt, "How do
// we find what is trending"):
//
//	S = p * ln(p / p_hat)
//
// p is the item's share of all the list's events in the latest 5-minute
// window (count_5m / total, total = schemas.List.Total), p_hat its baseline
// share: the highest share it had over the past week, not counting the
// current 5-minute slot (and for hourly history, the current hour). The first
// factor rewards size, the logarithm surprise; a share at or below its
// baseline scores 0. Refinements, each a Config field:
//
//   - Smoothing floor (FloorPerHour): p_hat is at least the share of "three
//     events an hour", 3 * 5/60 = 0.25 events per 5 minutes, so an item
//     without history does not get an infinite ratio.
//   - Minimum volume (MinCount): an item with fewer events in the window
//     scores 0.
//   - Noise guard (NoiseZ): the ratio uses the count's Poisson lower bound
//     count - z*sqrt(count), so an evergreen item's sampling noise above its
//     own maximum (a 1% excursion of a 10%-share item would score 1e-3) does
//     not trend. z = 0 is the plain score.
//   - Decayed peaks (HalfLife): each item keeps its best live score and when
//     it happened; the peak decays by half every HalfLife (2 h), and items
//     rank by max(live, decayed peak), so a trend fades after the final over
//     instead of vanishing.
//   - Hysteresis (Enter > Leave): an item enters the list when its score
//     reaches Enter and stays until it falls below Leave.
//   - Seasonality (Seasonal, off by default): p_hat from the same hour a
//     week ago and the last two hours instead of the week's maximum, for
//     weekly rhythms ("#mondaymotivation" on a Monday is usual; on a Tuesday
//     it is news).
//   - Warm-up (WarmUp): until the list's history covers WarmUp (the job's own
//     ticks, or exact hours from History), lists are published empty, with
//     baseline_hours saying why: a baseline of a few minutes makes every
//     evergreen item look new.
//
// # History and memory
//
// Only warm items have history: the items of the 5-minute lists the scorer
// is fed, counted at least MinTrack times (default 2; the long tail never
// gets a slot). An item counted less is treated as absent, at most the
// list's cut (below): most of a small list's 5-minute items are counted
// once (78-84% of a country's or region's hashtags and searches by users
// in the replay of BENCHMARKS.md), and tracking them turned every slot
// over in a few minutes, evicting the history of the items that come
// back (TestMinTrackKeepsHistory: an evergreen item absent for 20
// minutes then returned as new and trended). Per tracked item it keeps the
// maximum share seen in each 5-minute slot of the current hour (12 float32)
// and in each hour of the past week (Config.Hours float32, 169: back to the
// same hour a week ago), a peak
// (score and time), its last count and a listed flag: about 800 bytes with
// the name (BENCHMARKS.md). Tracked items per list are capped at
// Config.MaxItems (2,000: about 1.6 MB per list, of which the streaming
// job reads and writes about 85 kB a minute and the hourly rings once an
// hour: split.go); a new item beyond the cap
// evicts the least relevant tracked item: one absent from the latest input
// and not listed, seen longest ago, then the lowest score. A spam wave of
// junk keys cannot grow the state: it only reaches the scorer through the
// bounded 5-minute list.
//
// An item that was not tracked before gets, as its past, the list's cut: the
// share of the last entry of each earlier list (an item absent from a list
// had at most that share; 0 when the list held every item), or of the
// largest count under MinTrack when that is more. History can
// seed older hours from the exact tables (History: hourly exact counts over
// the list's hourly totals, transforms/exact/store), once per item when it
// becomes tracked; the values stay in the item's state. Exact hourly shares
// are hour averages, so they are at most the 5-minute maxima the job itself
// would have recorded.
//
// # Events or distinct users
//
// The scorer is unit-free: Input's counts and total are events
// (schemas.CountsEvents, a list's entries over its total) or distinct
// trusted users (schemas.CountsUsers: each item's distinct users, sampled
// by trust weight, over the list's distinct (user, item) pairs), and the
// list says which. The streaming job scores users by default
// (transforms/trend/trendbeam): then 3,000 new accounts posting a tag 100
// times weigh what their trust says (at 0.002, six users, under MinCount),
// not 3,000 or 300,000. The hourly history from the exact tables is event
// shares either way (the exact path counts events); for organic traffic,
// where an account posts an item about once, the two shares agree.
package trend

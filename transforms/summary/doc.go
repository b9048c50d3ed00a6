// Package summary is topk's counting core: a bounded, mergeable summary of
// item counts with deterministic per-item error bounds. It has no Beam import;
// the pipeline wraps it in DoFns and CombineFns, and tests, fuzzers and
// benchmarks use it directly.
//
// A Summary describes the counts of one list's items in one partition over
// one time range. It holds up to N tracked entries, each with bounds
// lo <= true count <= hi; a floor Theta such that every untracked item's true
// count is <= Theta; and optionally a count-min sketch (Cormode and
// Muthukrishnan, "An improved data stream summary: the count-min sketch and
// its applications", J. Algorithms 55(1), 2005) of all counts, which gives a
// second upper bound min over rows of the item's cells for any untracked item.
//
// Built from exact counts (Counter, a bundle's hash map), the N largest are
// tracked with lo = hi = count and Theta is the largest count not kept. Merging
// two summaries of disjoint event sets (MergeEvents: two bundles, two time
// buckets) adds lo and hi, using the other side's bound min(Theta, cms(x)) for
// an item it does not track, adds Theta and the sketches, then keeps the N
// largest by hi and raises Theta to the largest hi dropped. Merging summaries
// of disjoint key sets (MergeKeys: partitions) takes the union with
// Theta = max. This is the Misra-Gries/Space-Saving family of mergeable
// summaries (Agarwal et al., "Mergeable summaries", PODS 2012) restated with
// explicit two-sided bounds.
//
// A summary that left items out also keeps Drops, a sketch of what it
// dropped (see Drops): four rows of four-bit cells where a cut records each
// dropped item as the maximum of its cells and its hi, and merges add the
// cells. An untracked item's bound is then the least of Theta, its Drops
// cells and its count-min estimate. Theta bounds every untracked item
// alike and merges add it, so in a spam wave every bucket's overflow of
// junk keys raised every item's hi by the other buckets' Thetas; Drops
// gives an item a bucket never saw 0 instead. A side without Drops and
// with Theta > 0 (encoded before Drops existed, or a union of partitions)
// bounds by Theta alone, and so does every merge it takes part in.
//
// Guarantee, for every merge order: no tracked entry's hi under-counts and no
// lo over-counts its item's true count, and every untracked item's count is at
// most Theta (and at most its sketch estimate and its Drops bound). The
// bounds are deterministic: there is no failure probability. Memory is N
// entries plus the fixed sketch and at most 64 KiB of Drops, whatever the
// number of distinct items: see SizeBytes.
//
// Answer ranks by hi, reports count = hi and lower = lo, and certifies the
// first k entries as the true top k (as a set, up to ties) when their smallest
// lo is >= every bound outside them: the hi of every tracked item ranked below
// and Theta. CertifiedK is the largest such k.
package summary

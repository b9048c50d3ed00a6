package summary

import "slices"

// Union answers the union of summaries of disjoint key sets over the same
// events (the partitions of one list) without building the merged summary:
// AddEncoded every part, then Answer. Answer(limit) equals
// UnionKeys(parts, limit).Answer(limit) and Theta and Total equal the union
// summary's, but the entries are decoded straight into one slice, cut by
// their hi values (cutTop) and sorted once in rank order, where UnionKeys
// sorts them into key order and Answer copies and sorts them again. A Union can be reused after Reset.
type Union struct {
	// Total is the sum of the parts' totals, Theta the largest bound of an
	// item left out (after Answer: including the entries it cut).
	Total, Theta uint64
	entries      []Entry
	cut          []Entry
	slots        []int32 // dedupe's table
	scratch      Summary
}

// Reset empties u, keeping its buffers.
func (u *Union) Reset() {
	clear(u.entries)
	clear(u.cut)
	*u = Union{entries: u.entries[:0], cut: u.cut[:0], slots: u.slots, scratch: u.scratch}
}

// AddEncoded decodes one part (MarshalBinary) and adds it, its entries
// decoded straight into u's.
func (u *Union) AddEncoded(data []byte) error {
	base := len(u.entries)
	err := u.scratch.unmarshal(data, func(ne int) []Entry {
		u.entries = slices.Grow(u.entries, ne)[:base+ne]
		return u.entries[base:]
	}, false)
	u.scratch.Entries = nil // they are u's
	if err != nil {
		clear(u.entries[base:])
		u.entries = u.entries[:base]
		return err
	}
	u.Total += u.scratch.Total
	u.Theta = max(u.Theta, u.scratch.Theta)
	return nil
}

// Len is the number of entries added (before any cut).
func (u *Union) Len() int { return len(u.entries) }

// Answer keeps the limit largest entries by hi (limit <= 0: all), raising
// Theta to the largest hi dropped, and ranks them: the answer of the first
// limit (all with limit <= 0). The answer's entries are u's: read them
// before the next AddEncoded or Reset. Parts should hold disjoint key sets;
// an item in two parts is listed once (see dedupe).
func (u *Union) Answer(limit int) Answer {
	es := u.entries
	if limit > 0 && len(es) > limit {
		// cutTop's selection over hi values, then one sort of the kept.
		var dropped uint64
		u.cut, dropped = cutTop(u.cut[:0], es, limit, 0, nil)
		u.Theta = max(u.Theta, dropped)
		es = u.cut
	}
	slices.SortFunc(es, cmpRank)
	es = u.dedupe(es)
	return answerRanked(es, u.Theta, len(es))
}

// dedupe drops every entry whose item a higher-ranked entry already holds,
// keeping rank order. Parts of disjoint key sets share no item, yet the 4M
// replay of issue 9 once had a hashtag in two parts of one 5m list (most
// likely one partition's result delivered twice): UnionKeys kept one entry
// per item, and so does this, the first in rank order (the larger
// bounds). A table of the entries' hashes, so the usual case costs one
// probe per entry.
func (u *Union) dedupe(es []Entry) []Entry {
	size := 16
	for size < 2*len(es) {
		size *= 2
	}
	if cap(u.slots) < size {
		u.slots = make([]int32, size)
	}
	slots := u.slots[:size]
	clear(slots)
	mask := uint64(size - 1)
	n := 0
next:
	for i := range es {
		h := es[i].Hash
		for j := h & mask; ; j = (j + 1) & mask {
			k := slots[j]
			if k == 0 {
				slots[j] = int32(n + 1)
				break
			}
			if o := &es[k-1]; o.Hash == h && o.Item == es[i].Item {
				continue next // listed above
			}
		}
		es[n] = es[i]
		n++
	}
	clear(es[n:])
	return es[:n]
}

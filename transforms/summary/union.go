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
	scratch      Summary
}

// Reset empties u, keeping its buffers.
func (u *Union) Reset() {
	clear(u.entries)
	clear(u.cut)
	*u = Union{entries: u.entries[:0], cut: u.cut[:0], scratch: u.scratch}
}

// AddEncoded decodes one part (MarshalBinary) and adds it, its entries
// decoded straight into u's.
func (u *Union) AddEncoded(data []byte) error {
	base := len(u.entries)
	err := u.scratch.unmarshal(data, func(ne int) []Entry {
		u.entries = slices.Grow(u.entries, ne)[:base+ne]
		return u.entries[base:]
	})
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
// before the next AddEncoded or Reset. Parts must hold disjoint key sets (an item
// in two parts would be listed twice; UnionKeys keeps one).
func (u *Union) Answer(limit int) Answer {
	es := u.entries
	if limit > 0 && len(es) > limit {
		// cutTop's selection over hi values, then one sort of the kept.
		var dropped uint64
		u.cut, dropped = cutTop(u.cut[:0], es, limit, 0)
		u.Theta = max(u.Theta, dropped)
		es = u.cut
	}
	slices.SortFunc(es, cmpRank)
	return answerRanked(es, u.Theta, len(es))
}

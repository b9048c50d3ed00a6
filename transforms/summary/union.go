package summary

import "slices"

// Union answers the union of summaries of disjoint key sets over the same
// events (the partitions of one list) without building the merged summary:
// Add (or AddEncoded) every part, then Answer. Answer(limit) equals
// UnionKeys(parts, limit).Answer(limit) and Theta and Total equal the union
// summary's, but the entries are copied once, selected and sorted once in
// rank order, where UnionKeys sorts them into key order and Answer copies
// and sorts them again. A Union can be reused after Reset.
type Union struct {
	// Total is the sum of the parts' totals, Theta the largest bound of an
	// item left out (after Answer: including the entries it cut).
	Total, Theta uint64
	entries      []Entry
	scratch      Summary
}

// Reset empties u, keeping its buffers.
func (u *Union) Reset() {
	clear(u.entries)
	*u = Union{entries: u.entries[:0], scratch: u.scratch}
}

// Add adds one part's entries, Total and Theta (sm is not kept).
func (u *Union) Add(sm *Summary) {
	u.entries = append(u.entries, sm.Entries...)
	u.Total += sm.Total
	u.Theta = max(u.Theta, sm.Theta)
}

// AddEncoded decodes one part (MarshalBinary) into a reused scratch summary
// and adds it.
func (u *Union) AddEncoded(data []byte) error {
	if err := u.scratch.UnmarshalBinary(data); err != nil {
		return err
	}
	u.Add(&u.scratch)
	return nil
}

// Len is the number of entries added (before any cut).
func (u *Union) Len() int { return len(u.entries) }

// Answer keeps the limit largest entries by hi (limit <= 0: all), raising
// Theta to the largest hi dropped, and ranks them: the answer of the first
// limit (all with limit <= 0). The answer's entries are u's: read them
// before the next Add or Reset. Parts must hold disjoint key sets (an item
// in two parts would be listed twice; UnionKeys keeps one).
func (u *Union) Answer(limit int) Answer {
	es := u.entries
	if limit > 0 && len(es) > limit {
		selectTop(es, limit, cmpRank)
		for _, e := range es[limit:] {
			u.Theta = max(u.Theta, e.Hi)
		}
		es = es[:limit]
	}
	slices.SortFunc(es, cmpRank)
	return answerRanked(es, u.Theta, len(es))
}

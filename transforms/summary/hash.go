package summary

import "github.com/cespare/xxhash/v2"

// Hash is the one 64-bit hash of an item id: it picks the item's partition
// and its sketch cells, so each key is hashed once per event.
func Hash(item string) uint64 { return xxhash.Sum64String(item) }

// Partition maps a hash to [0, p). It remixes the hash first so that the
// partition is independent of the bits the sketch rows use.
func Partition(h uint64, p int) int {
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return int((h >> 32) * uint64(p) >> 32)
}

package store

import (
	"context"
	"fmt"
	"strings"

	"cloud.google.com/go/bigtable"
)

// ---- the durable deny set (takedowns) ----
//
// The serving binary's deny set of removed items lives here, one row per
// removed (type, item): r#{type}#{item} with c:json, the removal record the
// caller encodes (serving stores liststore.Removal JSON). Redis holds its
// cache; this table is the truth: a removal is written here before Redis,
// and a Redis that comes back empty is refilled from here.

func removalRow(typ, item string) string { return "r#" + esc(typ) + "#" + esc(item) }

// RemovalRecord is one row of the deny set.
type RemovalRecord struct {
	Type, Item string
	Record     []byte // the caller's encoding of the removal
}

// PutRemoval writes (or overwrites) the removal of (typ, item).
func (s *Store) PutRemoval(ctx context.Context, typ, item string, record []byte) error {
	if typ == "" || item == "" {
		return fmt.Errorf("store: put removal: empty type or item")
	}
	m := bigtable.NewMutation()
	m.Set(famC, "json", cellTS, record)
	if err := s.tbl.Apply(ctx, removalRow(typ, item), m); err != nil {
		return fmt.Errorf("store: put removal %s/%s: %w", typ, item, err)
	}
	return nil
}

// DeleteRemoval deletes the removal of (typ, item); existed reports whether
// there was one.
func (s *Store) DeleteRemoval(ctx context.Context, typ, item string) (existed bool, err error) {
	row := removalRow(typ, item)
	r, err := s.tbl.ReadRow(ctx, row, latest)
	if err != nil {
		return false, fmt.Errorf("store: delete removal %s/%s: %w", typ, item, err)
	}
	if len(r) == 0 {
		return false, nil
	}
	if err := s.tbl.Apply(ctx, row, deleteRow()); err != nil {
		return false, fmt.Errorf("store: delete removal %s/%s: %w", typ, item, err)
	}
	return true, nil
}

// Removals returns the whole deny set in row order (by type, then item).
func (s *Store) Removals(ctx context.Context) ([]RemovalRecord, error) {
	var out []RemovalRecord
	err := s.scan(ctx, "r#", func(r bigtable.Row) error {
		typ, item, ok := strings.Cut(strings.TrimPrefix(r.Key(), "r#"), "#")
		if !ok {
			return fmt.Errorf("store: malformed removal row %q", r.Key())
		}
		v, _ := cell(r, famC, "json")
		out = append(out, RemovalRecord{Type: unesc(typ), Item: unesc(item), Record: v})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: removals: %w", err)
	}
	return out, nil
}

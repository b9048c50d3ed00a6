package store

import (
	"context"
	"testing"
)

// Property: the deny set round-trips: a put is listed with its record
// (also for ids holding '#' and '%'), a second put overwrites, a delete
// reports whether the row existed and removes it, and other tables' rows
// are not listed.
func TestRemovals(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.SetExactUntil(ctx, hr(3)); err != nil {
			t.Fatal(err)
		}
		for _, r := range []RemovalRecord{{"video", "v#1%", []byte("a")}, {"video", "v_2", []byte("b")}, {"hashtag", "v_2", []byte("c")}} {
			if err := s.PutRemoval(ctx, r.Type, r.Item, r.Record); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutRemoval(ctx, "video", "v_2", []byte("b2")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Removals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []RemovalRecord{{"hashtag", "v_2", []byte("c")}, {"video", "v#1%", []byte("a")}, {"video", "v_2", []byte("b2")}}
		if len(got) != len(want) {
			t.Fatalf("got %d removals %+v, want %+v", len(got), got, want)
		}
		for i := range want {
			if got[i].Type != want[i].Type || got[i].Item != want[i].Item || string(got[i].Record) != string(want[i].Record) {
				t.Fatalf("removal %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		if existed, err := s.DeleteRemoval(ctx, "video", "v#1%"); err != nil || !existed {
			t.Fatalf("delete: %v %v", existed, err)
		}
		if existed, err := s.DeleteRemoval(ctx, "video", "v#1%"); err != nil || existed {
			t.Fatalf("second delete: %v %v", existed, err)
		}
		if got, _ := s.Removals(ctx); len(got) != 2 {
			t.Fatalf("after delete: %+v", got)
		}
	})
}

// Command liststats summarizes the lists a run wrote with --lists_out, per
// window, to compare two builds on the same replay: how many lists, the
// mean max_overcount, the share complete, the mean certified_k, and the
// mean upper minus lower bound of a listed entry. Trending lists are
// skipped.
//
//	go run ./scripts/liststats DIR [DIR...]
package main

import (
	"fmt"
	"log"
	"maps"
	"os"
	"slices"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish"
)

type stats struct {
	lists, complete, certified, entries int
	overcount, slack                    uint64
}

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: liststats DIR [DIR...]")
	}
	for _, dir := range os.Args[1:] {
		per := map[schemas.Window]*stats{}
		err := publish.EachTopList(dir, func(l *schemas.List) error {
			s := per[l.Window]
			if s == nil {
				s = &stats{}
				per[l.Window] = s
			}
			s.lists++
			s.overcount += l.MaxOvercount
			s.certified += l.CertifiedK
			if l.Complete {
				s.complete++
			}
			for _, e := range l.Items {
				s.entries++
				s.slack += e.Count - e.Lower
			}
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
		for _, w := range slices.Sorted(maps.Keys(per)) {
			s := per[w]
			fmt.Printf("%s %s: %d lists, mean max_overcount %.2f, complete %.1f%%, mean certified_k %.0f, mean count-lower %.3f\n",
				dir, w, s.lists, float64(s.overcount)/float64(s.lists), 100*float64(s.complete)/float64(s.lists),
				float64(s.certified)/float64(s.lists), float64(s.slack)/float64(max(s.entries, 1)))
		}
	}
}

package fastpath

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam"

	"github.com/topk-dev/topk/transforms/publish"
	"github.com/topk-dev/topk/transforms/trend/trendbeam"
)

// PublishTrending scores the 5-minute lists (merge.Lists' output for
// schemas.Window5m: KV<"type:scope:5m", list JSON>), by distinct trusted
// users from tallies (preagg.ApplyWithUsers) when tc counts users, into
// trending lists and
// publishes them next to the top lists (Redis key window "trending", files
// DIR/{type}/{scope}/trending/{as_of ms}.json). It returns the trending
// lists. Call it once, from Build, with the 5m lists:
//
//	lists := merge.Lists(s, windowed, w, cfg.Lists)
//	publish.Lists(s, lists, cfg.Publish)
//	if w == schemas.Window5m {
//		PublishTrending(s, lists, tallies, cfg.Trend, cfg.Publish)
//	}
//
// Test walkers of ListsOut that decode every file as a top list
// (replay_test.go's replay, window_test.go) must then skip
// DIR/{type}/{scope}/trending/. TestTrendingReplay checks the wiring end to
// end (it skips until Build calls this).
func PublishTrending(s beam.Scope, lists5m, tallies beam.PCollection, tc trendbeam.Config, pc publish.Config) beam.PCollection {
	s = s.Scope("fastpath.Trending")
	out := trendbeam.Trending(s, lists5m, tallies, tc)
	publish.Lists(s, out, pc)
	return out
}

// Command benchlist publishes a synthetic list for the serving benchmark
// (serving/bench.sh): video:global:1h with --items entries (default 1,100:
// K = 1,000 plus the margin), through liststore as the pipeline would, and
// stores the k=100 response body under {prefix}:bench:k100 so that
// redis-benchmark can GET a value of the same size as the API's answer.
// It prints the blob's key.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	prefix := flag.String("key_prefix", "topk", "key prefix")
	items := flag.Int("items", 1100, "entries in the list")
	flag.Parse()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: *addr})
	defer c.Close()
	st := liststore.New(c, liststore.Options{Prefix: *prefix})
	now := time.Now().UTC().Truncate(time.Minute)
	l := &schemas.List{Type: "video", Scope: "global", Window: schemas.Window1h, AsOf: now,
		MaxOvercount: 12, Complete: true, CertifiedK: min(*items, 1000), Version: now.Unix()}
	count := uint64(5_000_000)
	for i := 0; i < *items; i++ {
		count -= uint64(i%7) + 1
		l.Items = append(l.Items, schemas.Entry{Rank: i + 1, Item: fmt.Sprintf("v_%d", 1000+i*37), Count: count, Lower: count - uint64(i%12)})
	}
	if _, err := st.Publish(ctx, l); err != nil {
		log.Fatal(err)
	}
	k100 := *l
	k100.Items = l.Items[:min(100, len(l.Items))]
	k100.CertifiedK = min(k100.CertifiedK, 100)
	body, _ := json.Marshal(&k100)
	if err := c.Set(ctx, *prefix+":bench:k100", body, 0).Err(); err != nil {
		log.Fatal(err)
	}
	blob, _ := schemas.MarshalList(l)
	log.Printf("published %s v%d: blob %d bytes, k=100 body %d bytes", l.Key(), l.Version, len(blob), len(body))
	fmt.Println(st.BlobKey(l.Key(), l.Version))
}

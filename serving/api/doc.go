// Package api is topk's serving binary as a library: the read API over the
// published lists, the ingest API, takedowns, operations endpoints and the
// trending page. It imports schemas, go-redis and the Pub/Sub client, never
// Beam (check: go list -deps ./serving | grep beam prints nothing).
//
// # Embedding (runners/local)
//
//	srv, err := api.New(api.Config{Addr: ":8080", Redis: conn.Client, PubSubAddr: fake.Addr})
//	if err != nil { ... }
//	defer srv.Close()
//	err = srv.Run(ctx) // serves until ctx is done, then shuts down gracefully
//
// New connects (Redis: Config.Redis, else Config.RedisAddr, else REDIS_ADDR,
// else an embedded miniredis; Pub/Sub: Config.PubSub, else Config.PubSubAddr,
// else PUBSUB_EMULATOR_HOST, else an embedded pstest fake when Config.Local,
// else Google Cloud), loads every list once, subscribes to pointer moves and
// starts polling; Handler returns the http.Handler for tests; Serve takes a
// listener; Close stops the background work and closes what New opened
// (never a client passed in Config). Run(ctx, cfg) does all of it. Store
// returns the liststore.Store the server reads, for a caller that publishes
// through the same Redis. New fails when Redis is unreachable at startup;
// after that, reads never depend on Redis. The embedded Pub/Sub fake keeps
// every accepted beacon in memory (it is a sink for trying the API alone):
// a local all-in-one run passes its own fake's address in PubSubAddr so that
// the pipeline reads what the API accepts.
//
// # Endpoints
//
//	GET  /v1/top?type=video&scope=global&window=1h&k=100
//	     The first k (1..1000, default 100) entries of the current version
//	     of the list, minus removed items, as the list JSON of DESIGN.md
//	     section 6. scope defaults to "global". Ranks are renumbered after
//	     removals; certified_k is min(k, the certified entries left after
//	     removals); complete is the list's complete flag and every returned
//	     entry certified; stale is set when the list says so or when this
//	     server has not seen it move for Config.StaleAfter (Redis down, or the
//	     pipeline stopped). 400 names the bad parameter and its allowed values
//	     (type: the types of published lists and Config.Types; scope: global
//	     and the published scopes); 404 when the list has no version yet.
//	     Cache-Control max-age 10 s (1m, 5m, 1h) or 30 s (24h, all) with
//	     stale-while-revalidate; strong ETag per (version, body); 304 on
//	     If-None-Match; gzip on Accept-Encoding. Each response is rendered
//	     once per (list version, k, removals, stale) and served from bytes.
//	GET  /v1/lists    every list held: key, version, as_of, stale.
//	GET  /v1/charts/daily?type=video&scope=global&date=2026-11-30&k=100
//	     The exact chart of one UTC day from the Bigtable exact tables
//	     (Config.Exact; 503 "exact tables not configured" without it): the
//	     hourly exact counts of the day's hours that the recount marked done
//	     (store.DoneHours), summed per item, ranked by count (ties by item),
//	     minus removed items, the first k (1..1000, default 100):
//	     {"type","scope","date","final","hours_recounted","items":[{"rank",
//	     "item","count"}]}. final is true once all 24 hours are recounted;
//	     hours not yet done are left out, never read half written. type,
//	     scope and k are checked as for /v1/top; date (YYYY-MM-DD) is
//	     required and 400 when malformed or in the future. Cached per
//	     (type, scope, date), rendered per (k, removals): a final day until
//	     evicted (Cache-Control max-age 3600), another for a minute
//	     (max-age 60); strong ETag, 304, gzip as for /v1/top. 503 with
//	     Retry-After when Bigtable fails.
//	POST /v1/events   a JSON beacon {"beacon_id":..,"events":[..]}
//	     (Content-Type application/json). Events are validated with
//	     schemas.DefaultValidator; the accepted ones are published to the
//	     topic as one binary beacon (schemas.MarshalBeacon) with attributes
//	     "ts" (earliest event time, Unix ms) and "beacon_id". 202 only once
//	     Pub/Sub acknowledged it; the reply lists rejected events with
//	     reasons. A beacon_id seen within Config.DedupeTTL is acknowledged
//	     without publishing again (Redis SET NX; while the first attempt is
//	     in flight a retry gets 409 with Retry-After). If Redis is down the
//	     beacon is published without deduplication (at least once). When
//	     Pub/Sub does not acknowledge within Config.PublishTimeout (10 s; an
//	     outage, a restarting emulator, a missing topic) the answer is 503
//	     with Retry-After: the publish timeout is at most the HTTP write
//	     timeout minus IngestMargin (Config.Validate), so the 503 always
//	     reaches the client before the server would cut the connection. A
//	     503 beacon may still have been published (an ambiguous publish);
//	     its retry keeps the same event_ids. 413 over Config.MaxBodyBytes or
//	     Config.MaxEvents; 400 when no event is valid.
//	GET|POST|DELETE /v1/admin/removals   the deny set, with
//	     "Authorization: Bearer <Config.AdminToken>" (401 without, 403 with a
//	     wrong token or when no token is configured). POST {"type","item",
//	     "reason"} removes an item from every list of its type at once; DELETE
//	     (?type=&item= or the same JSON body) restores it.
//	GET  /healthz (alive), /readyz (lists loaded, not shutting down),
//	     /metrics (Prometheus), / (the trending page).
//
// Requests with 5xx answers are logged at Error, 4xx at Debug; successful
// reads are not logged (they are counted in /metrics).
package api

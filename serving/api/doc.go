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
//	GET  /v1/trending?type=hashtag&scope=IN-MH&k=20
//	     The first k (1..100, default 20) entries of the current trending
//	     list of (type, scope) (schemas.Trending: items unusually active for
//	     themselves now, transforms/trend), minus removed items, ranks
//	     renumbered. Validation, Cache-Control (10 s), ETag, 304, gzip and
//	     stale as for /v1/top; 404 until a trending list is published.
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
//	     (max-age 60); strong ETag, 304, gzip as for /v1/top;
//	     Surrogate-Key "topk topk:{type} topk:chart:{type}:{scope}". 503
//	     with Retry-After when Bigtable fails.
//	     Each entry of /v1/top also has "change", its rank movement since
//	     the previous version held in Redis (the liststore `prev` pointer),
//	     both ranked after removals: "+2" (up two), "-1", "=" or "new";
//	     absent when no previous version is held. Because it comes from
//	     Redis, a restarted server shows the same changes. "title" and
//	     "thumbnail" come from the catalogue (package catalogue), read when
//	     a version is installed and again when the catalogue changes;
//	     absent for items it does not know. "approximate" (per list) is
//	     false only when every returned count is exact (count = lower), the
//	     window is recounted up to as_of (exact_until >= as_of) and the
//	     returned ranking is certified. Responses carry Surrogate-Key
//	     "topk topk:{type} topk:{type}:{scope}:{window}" (package cdn).
//	GET|POST /v1/admin/rollback   (admin token) GET ?type=&scope=&window=
//	     lists the versions held in Redis and the current one; POST
//	     {"type","scope","window","version","reason"} moves the pointer back
//	     to that held, earlier version (409 when not earlier, 404 when not
//	     held), logs an "audit: list rolled back" record at Warn, serves it
//	     here at once (replicas within a poll) and purges the list's key
//	     from the CDN (Config.Purger). The pipeline's next publish moves the
//	     pointer forward again.
//	POST /v1/admin/catalogue   (admin token) NDJSON records
//	     {"type","item","title","thumbnail"} (Content-Type
//	     application/x-ndjson, at most 32 MiB) into the catalogue; 400
//	     names the first bad line.
//	POST /v1/events   a JSON beacon {"beacon_id":..,"events":[..]}
//	     (Content-Type application/json). Events are validated with
//	     schemas.DefaultValidator; the accepted ones are published to the
//	     topic as one binary beacon (schemas.MarshalBeacon) with attributes
//	     "ts" (earliest event time, Unix ms) and "beacon_id". 202 only once
//	     Pub/Sub acknowledged it; the reply lists rejected events with
//	     reasons. A beacon_id seen within Config.DedupeTTL is acknowledged
//	     without publishing again (Redis SET NX; while the first attempt is
//	     in flight a retry gets 409 with Retry-After). If Redis is down the
//	     beacon is published without deduplication (at least once); a
//	     client gone before the claim gets nothing published (it has no
//	     202 and sends the beacon again). When
//	     Pub/Sub does not acknowledge within Config.PublishTimeout (10 s; an
//	     outage, a restarting emulator, a missing topic) the answer is 503
//	     with Retry-After: the publish timeout is at most the HTTP write
//	     timeout minus IngestMargin (Config.Validate), so the 503 always
//	     reaches the client before the server would cut the connection. A
//	     503 beacon may still have been published (an ambiguous publish);
//	     its retry keeps the same event_ids. 413 over Config.MaxBodyBytes or
//	     Config.MaxEvents; 400 when no event is valid.
//	     Country and region come from the server, never the client: from
//	     Config.Profiles for a known account, else from the client IP in
//	     Config.Geo (a MaxMind-format database), else none; a client-sent
//	     country or region is dropped and counted. A beacon whose
//	     User-Agent matches a known bot (Config.Rules) is acknowledged
//	     (202, "dropped") and not published.
//	GET|POST|DELETE /v1/admin/removals   the deny set, with
//	     "Authorization: Bearer <Config.AdminToken>" (401 without, 403 with a
//	     wrong token or when no token is configured). POST {"type","item",
//	     "reason"} removes an item from every list of its type at once; DELETE
//	     (?type=&item= or the same JSON body) restores it.
//	     A removal also purges the CDN's copies of every response of its
//	     type (Surrogate-Key topk:{type}) when Config.Purger is set.
//	GET  /healthz (alive), /readyz (lists loaded, not shutting down),
//	     /metrics (Prometheus), / (the trending page).
//
// Requests with 5xx answers are logged at Error, 4xx at Debug; successful
// reads are not logged (they are counted in /metrics).
package api

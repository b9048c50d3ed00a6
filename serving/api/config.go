package api

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/cdn"
	"github.com/topk-dev/topk/serving/geo"
	"github.com/topk-dev/topk/transforms/exact/store"
	"github.com/topk-dev/topk/transforms/rules"
)

// MaxK is the largest k a read may ask for.
const MaxK = 1000

// DefaultStaleAfter is Config.StaleAfter's default.
const DefaultStaleAfter = 2 * time.Minute

// Defaults of the ingest deadline: a beacon's publish gives up after
// DefaultPublishTimeout, well inside the HTTP server's DefaultWriteTimeout.
const (
	DefaultPublishTimeout = 10 * time.Second
	DefaultWriteTimeout   = 30 * time.Second
	// IngestMargin is what an ingest answer needs besides the publish: the
	// beacon_id claim and its release (1 s each at most) and writing the
	// reply. PublishTimeout must be at most WriteTimeout - IngestMargin, so
	// that a client always gets the 503 (with Retry-After), never a
	// connection closed without an answer.
	IngestMargin = 3 * time.Second
)

// Config configures a Server. Zero fields take the defaults written next to
// them (Config.withDefaults is the one place they are applied).
type Config struct {
	// Addr is the listen address of Run. Zero: ":8080".
	Addr string

	// Redis, when set, is used as is and never closed by the server.
	Redis redis.UniversalClient
	// RedisAddr is dialled when Redis is nil. Zero: REDIS_ADDR, else an
	// embedded miniredis (local mode).
	RedisAddr string
	// KeyPrefix is the liststore key prefix. Zero: "topk".
	KeyPrefix string

	// PubSub, when set, is used as is and never closed by the server.
	PubSub *pubsub.Client
	// PubSubAddr is an emulator or fake address. Zero: PUBSUB_EMULATOR_HOST,
	// else an embedded pstest fake when Local, else Google Cloud.
	PubSubAddr string
	// PubSubProject is the project of the topic. Zero: "topk-local".
	PubSubProject string
	// Topic receives the accepted beacons. Zero: "views".
	Topic string
	// Local allows the embedded Pub/Sub fake when no address is configured.
	Local bool

	// AdminToken is the bearer token of /v1/admin/*. Zero: the admin API
	// answers 403 to everyone.
	AdminToken string
	// Types are item types accepted by /v1/top before any list of theirs is
	// published (they get 404 instead of 400 until then).
	Types []string

	// Geo derives each event's country and region from the client's IP
	// address; it is used as is and never closed by the server. Zero:
	// events keep no country (a client's own country is never trusted).
	Geo *geo.DB
	// ClientIPHeader, when set, names a header holding the client's IP
	// address as set by a trusted proxy in front of the server (one
	// address, such as X-Real-IP). Zero: the connection's remote address.
	ClientIPHeader string
	// Profiles, when set, gives the country and region of an account the
	// server knows; it wins over the IP address. Zero: no profile lookup.
	Profiles func(user string) (country, region string, ok bool)
	// Rules, when set, drops beacons whose User-Agent matches a known
	// bot's pattern (the one rule only ingest can apply). The other rules
	// are applied by the counting paths, so the view log keeps the facts
	// and a recount with new rules can change its mind.
	Rules *rules.Rules
	// Purger, when set, is asked to purge the CDN's copies of every list of
	// a type on a takedown, and of a list on a rollback (cdn.Fastly). Zero:
	// no purge; edge copies age out with their max-age.
	Purger cdn.Purger

	// Exact is the Bigtable exact store that GET /v1/charts/daily reads;
	// it is used as is and never closed by the server. Zero: the endpoint
	// answers 503 (exact tables not configured).
	Exact *store.Store

	// Removals is the durable deny set (takedowns) in Bigtable; it is used
	// as is and never closed by the server (it may be the same store as
	// Exact). Redis holds its cache (removals.go). Zero: takedowns live in
	// Redis only and are lost with its data (local mode).
	Removals *store.Store

	// StaleAfter marks a list stale when this server has not seen it move
	// for that long. Zero: 2 minutes.
	StaleAfter time.Duration
	// PollInterval is how often pointers are polled besides pub/sub. Zero: 5 s.
	PollInterval time.Duration
	// ScanInterval is how often Redis is scanned for new lists besides
	// pub/sub. Zero: 30 s.
	ScanInterval time.Duration
	// DedupeTTL is how long a beacon_id is remembered. Zero: 10 minutes.
	DedupeTTL time.Duration
	// MaxBodyBytes bounds a POST body. Zero: 4 MiB.
	MaxBodyBytes int64
	// MaxEvents bounds the events of one beacon. Zero: 1,000; at most
	// schemas.MaxBeaconEvents.
	MaxEvents int
	// RenderCacheBytes bounds the rendered responses cached per list
	// version, and separately the daily charts cached (their summed top
	// lists and renders); renders beyond it are served but not kept.
	// Zero: 16 MiB.
	RenderCacheBytes int64
	// ShutdownTimeout bounds the graceful shutdown of Run. Zero: 10 s.
	ShutdownTimeout time.Duration
	// PublishTimeout bounds the wait for Pub/Sub to acknowledge an ingested
	// beacon; past it the client gets 503 with Retry-After. Zero: 10 s. At
	// most WriteTimeout - IngestMargin (Validate).
	PublishTimeout time.Duration
	// WriteTimeout is the HTTP server's write timeout: a response not
	// written by then is cut off. Zero: 30 s.
	WriteTimeout time.Duration

	// Logger receives structured logs. Zero: slog.Default().
	Logger *slog.Logger
	// Registry receives the metrics. Zero: a new registry with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Now is the clock. Zero: time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = ":8080"
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "topk"
	}
	if c.PubSubProject == "" {
		c.PubSubProject = "topk-local"
	}
	if c.Topic == "" {
		c.Topic = "views"
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Second
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = 30 * time.Second
	}
	if c.DedupeTTL == 0 {
		c.DedupeTTL = 10 * time.Minute
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = 1000
	}
	if c.RenderCacheBytes == 0 {
		c.RenderCacheBytes = 16 << 20
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.PublishTimeout == 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"stale_after": c.StaleAfter, "poll_interval": c.PollInterval, "scan_interval": c.ScanInterval,
		"dedupe_ttl": c.DedupeTTL, "shutdown_timeout": c.ShutdownTimeout,
		"publish_timeout": c.PublishTimeout, "write_timeout": c.WriteTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", name, d))
		}
	}
	pt, wt := c.PublishTimeout, c.WriteTimeout
	if pt == 0 {
		pt = DefaultPublishTimeout
	}
	if wt == 0 {
		wt = DefaultWriteTimeout
	}
	if pt > 0 && wt > 0 && pt > wt-IngestMargin {
		errs = append(errs, fmt.Errorf("publish_timeout %s must be at most write_timeout %s - %s, or a client whose publish times out gets no answer at all", pt, wt, IngestMargin))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max_body_bytes %d is negative", c.MaxBodyBytes))
	}
	if c.MaxEvents < 0 || c.MaxEvents > schemas.MaxBeaconEvents {
		errs = append(errs, fmt.Errorf("max_events %d outside [0, %d]", c.MaxEvents, schemas.MaxBeaconEvents))
	}
	for _, t := range c.Types {
		if !schemas.IsType(t) {
			errs = append(errs, fmt.Errorf("type %q must match [a-z][a-z0-9_]{0,31}", t))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

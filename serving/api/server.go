package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/redis/go-redis/v9"

	"github.com/topk-dev/topk/internal/pubsubx"
	"github.com/topk-dev/topk/internal/redisx"
	"github.com/topk-dev/topk/serving/catalogue"
	"github.com/topk-dev/topk/transforms/publish/liststore"
)

// Server is the serving binary's state: clients, the lists held in memory,
// metrics and the HTTP handler.
type Server struct {
	cfg     Config
	log     *slog.Logger
	rconn   *redisx.Conn // owned; nil when Config.Redis was given
	rc      redis.UniversalClient
	store   *liststore.Store
	titles  *catalogue.Store
	ps      *pubsub.Client
	ownPS   bool
	fake    *pubsubx.Embedded // owned embedded Pub/Sub, or nil
	pub     *pubsub.Publisher
	metrics *metrics
	state   state
	charts  *chartCache
	handler http.Handler
	ready   atomic.Bool

	bgCancel  context.CancelFunc
	bgDone    chan struct{}
	closeOnce sync.Once
}

// Run is New, then Server.Run until ctx is done, then Close.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Run(ctx)
}

// New connects to Redis and Pub/Sub as Config says, loads every list once,
// subscribes to pointer moves and removals, and starts the polling fallback.
// The server is ready when New returns; Close releases it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.metrics = newMetrics(cfg.Registry, s)
	s.charts = newChartCache(cfg.RenderCacheBytes)
	s.state.rem.Store(newRemovalSet(0, nil))
	s.state.cat.Store(newCatalog(nil, cfg.Types))
	ok := false
	defer func() {
		if !ok {
			s.closeClients()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s.rc = cfg.Redis
	if s.rc == nil {
		conn, err := redisx.Connect(ctx, cfg.RedisAddr)
		if err != nil {
			return nil, fmt.Errorf("serving: %w", err)
		}
		s.rconn, s.rc = conn, conn.Client
		if conn.Embedded != nil {
			s.log.Info("redis: embedded (local mode)", "addr", conn.Addr)
		} else {
			s.log.Info("redis", "addr", conn.Addr)
		}
	}
	s.store = liststore.New(s.rc, liststore.Options{Prefix: cfg.KeyPrefix, Now: cfg.Now})
	s.titles = catalogue.New(s.rc, catalogue.Options{Prefix: cfg.KeyPrefix})

	if err := s.connectPubSub(ctx); err != nil {
		return nil, err
	}

	bg, bgCancel := context.WithCancel(context.Background())
	moves, err := s.store.Subscribe(bg)
	if err != nil {
		bgCancel()
		return nil, fmt.Errorf("serving: %w", err)
	}
	rems, err := s.store.SubscribeRemovals(bg)
	if err != nil {
		bgCancel()
		return nil, fmt.Errorf("serving: %w", err)
	}
	titles, err := s.titles.Subscribe(bg)
	if err != nil {
		bgCancel()
		return nil, fmt.Errorf("serving: %w", err)
	}
	if err := s.startRemovals(ctx); err != nil {
		bgCancel()
		return nil, fmt.Errorf("serving: %w", err)
	}
	if err := s.load(ctx); err != nil {
		bgCancel()
		return nil, fmt.Errorf("serving: initial load: %w", err)
	}
	s.bgCancel, s.bgDone = bgCancel, make(chan struct{})
	go func() {
		defer close(s.bgDone)
		s.refresher(bg, moves, rems, titles)
	}()
	s.handler = s.withCharts(s.routes())
	s.ready.Store(true)
	s.log.Info("lists loaded", "lists", len(s.state.cat.Load().keys), "removals", len(s.state.rem.Load().all))
	ok = true
	return s, nil
}

func (s *Server) connectPubSub(ctx context.Context) error {
	cfg := s.cfg
	if cfg.PubSub != nil {
		s.ps = cfg.PubSub
	} else {
		addr := cfg.PubSubAddr
		if addr == "" {
			addr = pubsubx.EmulatorAddr()
		}
		mode := "emulator"
		if addr == "" && cfg.Local {
			s.fake = pubsubx.StartEmbedded()
			addr, mode = s.fake.Addr, "embedded (local mode)"
		} else if addr == "" {
			mode = "google cloud"
		}
		c, err := pubsubx.NewClient(ctx, cfg.PubSubProject, addr)
		if err != nil {
			return fmt.Errorf("serving: %w", err)
		}
		s.ps, s.ownPS = c, true
		s.log.Info("pubsub", "mode", mode, "addr", addr, "project", cfg.PubSubProject, "topic", cfg.Topic)
	}
	if err := pubsubx.EnsureTopic(ctx, s.ps, cfg.Topic); err != nil {
		// In Google Cloud the topic is provisioned and the service account
		// may not be allowed to create it: publishing will tell.
		s.log.Warn("pubsub: could not ensure topic", "topic", cfg.Topic, "err", err)
	}
	s.pub = s.ps.Publisher(cfg.Topic)
	s.pub.PublishSettings.DelayThreshold = 2 * time.Millisecond
	// The client's own attempt gives up with the handler, so a beacon
	// answered 503 is rarely published after all (ingest.go).
	s.pub.PublishSettings.Timeout = cfg.PublishTimeout
	return nil
}

// withCharts routes GET /v1/charts/daily (charts.go) and everything else to
// next.
func (s *Server) withCharts(next http.Handler) http.Handler {
	charts := s.handle("charts", s.handleCharts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/charts/daily" {
			charts.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Handler is the server's HTTP handler (every route, instrumented).
func (s *Server) Handler() http.Handler { return s.handler }

// Store is the list store the server reads (tests and runners publish
// through it).
func (s *Server) Store() *liststore.Store { return s.store }

// Catalogue is the catalogue of titles the server hydrates entries from
// (the local run fills it with catalogue.FillSynthetic).
func (s *Server) Catalogue() *catalogue.Store { return s.titles }

// Run listens on Config.Addr and serves until ctx is done, then shuts down
// gracefully. It does not Close the server.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("serving: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then stops accepting, marks itself
// not ready and waits up to Config.ShutdownTimeout for requests in flight.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = coalescingListener{ln} // one write per pre-rendered answer (conn.go)
	hs := &http.Server{
		Handler:           s.handler,
		ConnContext:       connContext,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("serving", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	s.ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("serving: shutdown: %w", err)
	}
	s.log.Info("stopped")
	return nil
}

// Close stops the background refresh, flushes the publisher and closes what
// New opened. Safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.ready.Store(false)
		if s.bgCancel != nil {
			s.bgCancel()
			<-s.bgDone
		}
		s.closeClients()
	})
	return nil
}

func (s *Server) closeClients() {
	if s.pub != nil {
		s.pub.Stop()
	}
	if s.ownPS && s.ps != nil {
		s.ps.Close()
	}
	if s.fake != nil {
		s.fake.Close()
	}
	if s.rconn != nil {
		s.rconn.Close()
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

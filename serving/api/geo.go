package api

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/topk-dev/topk/schemas"
)

// geoMetrics count where events' countries came from.
type geoMetrics struct {
	// clientIgnored counts events that carried their own country or
	// region: never trusted, always replaced.
	clientIgnored prometheus.Counter
	// source counts events by where their country came from: profile, ip,
	// none (no database, no address, or an address it does not know), error.
	profile, ip, none, failed prometheus.Counter
}

func newGeoMetrics(reg *prometheus.Registry) *geoMetrics {
	ignored := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "topk_serving_ingest_client_geo_ignored_total",
		Help: "Events that carried a client-sent country or region, which ingest ignores (the server derives them).",
	})
	src := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "topk_serving_ingest_geo_events_total",
		Help: "Events by where ingest found their country: profile, ip, none (no database, no address or an unknown one), error (the lookup failed).",
	}, []string{"source"})
	reg.MustRegister(ignored, src)
	return &geoMetrics{
		clientIgnored: ignored,
		profile:       src.WithLabelValues("profile"),
		ip:            src.WithLabelValues("ip"),
		none:          src.WithLabelValues("none"),
		failed:        src.WithLabelValues("error"),
	}
}

// geoLookup locates the events of one request: the client address is
// looked up once, profiles once per user.
type geoLookup struct {
	s       *Server
	ip      netip.Addr
	done    bool
	country string
	region  string
	users   map[string][2]string
}

func (s *Server) newGeoLookup(r *http.Request) *geoLookup {
	return &geoLookup{s: s, ip: clientIP(r, s.cfg.ClientIPHeader)}
}

// clientIP is the address in header (when named and well formed), else
// the connection's remote address.
func clientIP(r *http.Request, header string) netip.Addr {
	if header != "" {
		if a, err := netip.ParseAddr(strings.TrimSpace(r.Header.Get(header))); err == nil {
			return a.Unmap()
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// locate replaces e's country and region with the server's: the user's
// profile when the server knows the account, else the client address's
// place in the database, else none. What the client sent is ignored (and
// counted).
func (g *geoLookup) locate(e *schemas.Event) {
	m := g.s.metrics.geo
	if e.Country != "" || e.Region != "" {
		m.clientIgnored.Inc()
	}
	e.Country, e.Region = "", ""
	if e.User != "" && g.s.cfg.Profiles != nil {
		cr, ok := g.users[e.User]
		if !ok {
			if c, r, found := g.s.cfg.Profiles(e.User); found && schemas.IsCountry(c) {
				cr = [2]string{c, ""}
				if schemas.IsRegion(r) && r[:2] == c {
					cr[1] = r
				}
			}
			if g.users == nil {
				g.users = map[string][2]string{}
			}
			g.users[e.User] = cr
		}
		if cr[0] != "" {
			e.Country, e.Region = cr[0], cr[1]
			m.profile.Inc()
			return
		}
	}
	if !g.done {
		g.done = true
		if g.s.cfg.Geo != nil && g.ip.IsValid() {
			c, r, err := g.s.cfg.Geo.Lookup(g.ip)
			if err != nil {
				m.failed.Inc()
				g.s.log.Warn("geo lookup failed", "ip", g.ip.String(), "err", err)
			}
			g.country, g.region = c, r
		}
	}
	if g.country == "" {
		m.none.Inc()
		return
	}
	e.Country, e.Region = g.country, g.region
	m.ip.Inc()
}

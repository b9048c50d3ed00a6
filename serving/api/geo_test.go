package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/topk-dev/topk/schemas"
	"github.com/topk-dev/topk/serving/geo"
	"github.com/topk-dev/topk/serving/geo/geotest"
	"github.com/topk-dev/topk/transforms/rules"
)

func testGeoDB(t *testing.T) *geo.DB {
	t.Helper()
	b, err := geotest.BuildTestDB([]geotest.Network{
		{CIDR: "203.0.113.0/24", Country: "IN", Region: "MH"},
		{CIDR: "198.51.100.0/24", Country: "BR", Region: "SP"},
		{CIDR: "2001:db8:1::/48", Country: "DE"},
	})
	if err != nil {
		t.Fatal(err)
	}
	db, err := geo.OpenBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// publishedEvents decodes every message the fake Pub/Sub holds.
func publishedEvents(t *testing.T, e *testEnv) []schemas.Event {
	t.Helper()
	var out []schemas.Event
	for _, m := range e.fake.Srv.Messages() {
		var b schemas.Beacon
		if err := schemas.UnmarshalBeacon(m.Data, &b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b.Events...)
	}
	return out
}

// Property (issue 12): events from IPs in the geo database land in that
// country and region (and so in those scopes' lists); a client claiming
// another country does not move them, and the claim is counted; an IP the
// database does not know, or no database, gives no country; a known
// account's profile wins over the IP.
func TestIngestGeoFromServer(t *testing.T) {
	db := testGeoDB(t)
	e := newEnv(t, func(c *Config) {
		c.Geo = db
		c.ClientIPHeader = "X-Real-IP"
		c.Profiles = func(user string) (string, string, bool) {
			if user == "u_known" {
				return "JP", "JP-13", true
			}
			return "", "", false
		}
	}).start(t)
	ts := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	post := func(id, ip, extra string) {
		t.Helper()
		body := fmt.Sprintf(`{"beacon_id":%q,"events":[{"event_id":"%s-1","type":"video","item":"v_1","ts":%q%s}]}`, id, id, ts, extra)
		hdr := map[string]string{"Content-Type": "application/json", "X-Real-IP": ip}
		if resp, b := e.do(t, "POST", "/v1/events", hdr, body); resp.StatusCode != 202 {
			t.Fatalf("%s: %d %s", id, resp.StatusCode, b)
		}
	}
	post("in", "203.0.113.9", "")
	post("in-claims-us", "203.0.113.9", `,"country":"US","region":"US-CA"`)
	post("br", "198.51.100.1", `,"country":"IN"`)
	post("de6", "2001:db8:1::5", "")
	post("unknown", "192.0.2.1", `,"country":"FR"`)
	post("profile", "203.0.113.9", `,"user":"u_known"`)
	post("stranger", "198.51.100.1", `,"user":"u_stranger"`)

	want := map[string][2]string{
		"in-1": {"IN", "IN-MH"}, "in-claims-us-1": {"IN", "IN-MH"}, "br-1": {"BR", "BR-SP"},
		"de6-1": {"DE", ""}, "unknown-1": {"", ""}, "profile-1": {"JP", "JP-13"}, "stranger-1": {"BR", "BR-SP"},
	}
	got := publishedEvents(t, e)
	if len(got) != len(want) {
		t.Fatalf("%d events published, want %d", len(got), len(want))
	}
	var scopes []string
	for _, ev := range got {
		w := want[ev.EventID]
		if ev.Country != w[0] || ev.Region != w[1] {
			t.Errorf("%s: country %q region %q, want %q %q", ev.EventID, ev.Country, ev.Region, w[0], w[1])
		}
		if ev.EventID == "in-claims-us-1" {
			scopes = ev.Scopes(scopes)
			if strings.Join(scopes, ",") != "global,IN,IN-MH" {
				t.Errorf("scopes of a client claiming US from India: %v", scopes)
			}
		}
	}
	if n := counterValue(t, e.srv.metrics.geo.clientIgnored); n != 3 {
		t.Fatalf("client geo ignored %v times, want 3", n)
	}
	if n := counterValue(t, e.srv.metrics.geo.none); n != 1 {
		t.Fatalf("%v events without a country, want 1", n)
	}
}

// Property: without a geo database, no event keeps a country, whatever the
// client says.
func TestIngestNoGeoDBKeepsNoCountry(t *testing.T) {
	e := newEnv(t, nil).start(t)
	ts := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	body := fmt.Sprintf(`{"beacon_id":"b","events":[{"event_id":"e","type":"video","item":"v","ts":%q,"country":"IN","region":"IN-MH"}]}`, ts)
	if resp, b := e.do(t, "POST", "/v1/events", jsonHdr, body); resp.StatusCode != 202 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, ev := range publishedEvents(t, e) {
		if ev.Country != "" || ev.Region != "" {
			t.Fatalf("event kept the client's %q %q", ev.Country, ev.Region)
		}
	}
}

// Property: a beacon from a known bot's user agent is acknowledged and not
// published; --rules=none publishes it.
func TestIngestDropsBotAgents(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bots")
	if err := os.WriteFile(p, []byte("ua:headless|crawler\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, off := range []bool{false, true} {
		cfg := rules.DefaultConfig()
		cfg.Bots, cfg.Off = p, off
		rs, err := rules.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, func(c *Config) { c.Rules = rs }).start(t)
		ts := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
		body := fmt.Sprintf(`{"beacon_id":"b","events":[{"event_id":"e","type":"video","item":"v","ts":%q}]}`, ts)
		hdr := map[string]string{"Content-Type": "application/json", "User-Agent": "Mozilla/5.0 HeadlessChrome/120"}
		resp, b := e.do(t, "POST", "/v1/events", hdr, body)
		r := decodeReply(t, b)
		if resp.StatusCode != 202 {
			t.Fatalf("off=%v: %d %s", off, resp.StatusCode, b)
		}
		n := len(e.fake.Srv.Messages())
		if !off && (n != 0 || r.Dropped != 1 || r.Accepted != 0) {
			t.Fatalf("bot beacon: %d messages, reply %+v", n, r)
		}
		if off && (n != 1 || r.Accepted != 1) {
			t.Fatalf("--rules=none: %d messages, reply %+v", n, r)
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

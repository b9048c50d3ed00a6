package geo_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/topk-dev/topk/serving/geo"
	"github.com/topk-dev/topk/serving/geo/geotest"
)

var testNets = []geotest.Network{
	{CIDR: "203.0.113.0/24", Country: "IN", Region: "MH"},
	{CIDR: "198.51.100.0/25", Country: "IN", Region: "KA"},
	{CIDR: "198.51.100.128/25", Country: "BR"},
	{CIDR: "2001:db8:1::/48", Country: "DE", Region: "BY"},
	{CIDR: "192.0.2.0/24", Country: "zz"}, // malformed code: ignored
}

// Property: addresses in the database's networks get their country and
// region; addresses outside get none; malformed codes are not trusted.
func TestLookup(t *testing.T) {
	b, err := geotest.BuildTestDB(testNets)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "city.mmdb")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := geo.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct{ ip, country, region string }{
		{"203.0.113.7", "IN", "IN-MH"},
		{"::ffff:203.0.113.7", "IN", "IN-MH"},
		{"198.51.100.1", "IN", "IN-KA"},
		{"198.51.100.200", "BR", ""},
		{"2001:db8:1::42", "DE", "DE-BY"},
		{"192.0.2.1", "", ""},
		{"8.8.8.8", "", ""},
		{"2001:db8:2::1", "", ""},
	} {
		country, region, err := db.Lookup(netip.MustParseAddr(c.ip))
		if err != nil || country != c.country || region != c.region {
			t.Errorf("%s: (%q, %q, %v), want (%q, %q)", c.ip, country, region, err, c.country, c.region)
		}
	}
	if c, r, err := db.Lookup(netip.Addr{}); c != "" || r != "" || err != nil {
		t.Fatalf("zero address: %q %q %v", c, r, err)
	}
	if _, err := geo.OpenBytes([]byte("not a database")); err == nil {
		t.Fatal("garbage opened as a database")
	}
}

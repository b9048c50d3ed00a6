// Package geo derives an event's country and region on the server, from
// the client's IP address, with a MaxMind-format database (GeoIP2 or
// GeoLite2 City, or any database with the same country.iso_code and
// subdivisions[].iso_code fields) read by
// github.com/oschwald/maxminddb-golang/v2. The ingest API uses it so that
// scopes never come from what a client claims. It has no Beam import.
//
// The region is ISO 3166-2: the country code, a dash and the first
// subdivision's code ("IN-MH"). A lookup that finds nothing, or finds codes
// that are not well formed, gives no country (and then no region): an event
// without a country counts in the global lists only.
package geo

import (
	"fmt"
	"net/netip"

	"github.com/oschwald/maxminddb-golang/v2"

	"github.com/topk-dev/topk/schemas"
)

// DB is an open database. It is safe for concurrent use.
type DB struct {
	r *maxminddb.Reader
}

// Open opens the database file at path (memory-mapped).
func Open(path string) (*DB, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("geo: open %s: %w", path, err)
	}
	return &DB{r: r}, nil
}

// OpenBytes opens a database held in memory.
func OpenBytes(b []byte) (*DB, error) {
	r, err := maxminddb.OpenBytes(b)
	if err != nil {
		return nil, fmt.Errorf("geo: %w", err)
	}
	return &DB{r: r}, nil
}

// Close releases the database.
func (d *DB) Close() error { return d.r.Close() }

// record is the part of a City record Lookup reads.
type record struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Subdivisions []struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"subdivisions"`
}

// Lookup returns ip's country (ISO 3166-1 alpha-2) and region (ISO 3166-2),
// "" for what the database does not know. An IPv4-mapped IPv6 address is
// looked up as IPv4.
func (d *DB) Lookup(ip netip.Addr) (country, region string, err error) {
	if !ip.IsValid() {
		return "", "", nil
	}
	var rec record
	res := d.r.Lookup(ip.Unmap())
	if !res.Found() {
		return "", "", res.Err()
	}
	if err := res.Decode(&rec); err != nil {
		return "", "", fmt.Errorf("geo: lookup %s: %w", ip, err)
	}
	country = rec.Country.ISOCode
	if !schemas.IsCountry(country) {
		return "", "", nil
	}
	if len(rec.Subdivisions) > 0 {
		if r := country + "-" + rec.Subdivisions[0].ISOCode; schemas.IsRegion(r) {
			region = r
		}
	}
	return country, region, nil
}

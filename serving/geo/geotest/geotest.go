// Package geotest builds small MaxMind-format databases at test time.
package geotest

import (
	"bytes"
	"fmt"
	"net"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// Network is one network of a test database and where it is.
type Network struct {
	CIDR    string // "203.0.113.0/24"
	Country string // "IN"
	Region  string // subdivision code without the country: "MH"; "" none
}

// BuildTestDB writes a City-format database holding networks, built at
// run time with github.com/maxmind/mmdbwriter (nothing is downloaded): for
// tests of this package and of the ingest API. Reserved ranges (the
// documentation and private networks) are allowed, so tests can use them.
func BuildTestDB(networks []Network) ([]byte, error) {
	t, err := mmdbwriter.New(mmdbwriter.Options{
		DatabaseType:            "GeoIP2-City",
		IncludeReservedNetworks: true,
		RecordSize:              24,
	})
	if err != nil {
		return nil, err
	}
	for _, n := range networks {
		_, ipnet, err := net.ParseCIDR(n.CIDR)
		if err != nil {
			return nil, err
		}
		rec := mmdbtype.Map{"country": mmdbtype.Map{"iso_code": mmdbtype.String(n.Country)}}
		if n.Region != "" {
			rec["subdivisions"] = mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String(n.Region)}}
		}
		if err := t.Insert(ipnet, rec); err != nil {
			return nil, fmt.Errorf("geo: insert %s: %w", n.CIDR, err)
		}
	}
	var buf bytes.Buffer
	if _, err := t.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Package prismtest is the TestMain of every package whose tests run
// pipelines: ptest.Main with prismopt.Apply, so that tests run on Prism
// the way the commands do.
package prismtest

import (
	"flag"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/topk-dev/topk/internal/prismopt"
)

// Main parses the flags, applies prismopt and runs ptest.Main(m).
func Main(m *testing.M) {
	flag.Parse()
	prismopt.Apply()
	ptest.Main(m)
}

package source

import (
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// Pipelines in these tests run on Prism in-process (ptest's default runner).
func TestMain(m *testing.M) { ptest.Main(m) }

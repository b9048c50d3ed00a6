package source

import (
	"testing"

	"github.com/topk-dev/topk/internal/prismopt/prismtest"
)

// Pipelines in these tests run on Prism in-process (ptest's default runner).
func TestMain(m *testing.M) { prismtest.Main(m) }

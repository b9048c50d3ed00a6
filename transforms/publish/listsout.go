package publish

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/topk-dev/topk/schemas"
)

// EachTopList calls each for every top list file under dir, a --lists_out
// folder as Lists writes it (dir/type/scope/window/as_of_ms.json), decoded:
// not the trending lists (window "trending", another schema) nor dead
// letters kept under dir. It stops at the first error, a file that does
// not decode included.
func EachTopList(dir string, each func(*schemas.List) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == string(schemas.WindowTrending) {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") || strings.Contains(p, "deadletter") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		l, err := schemas.UnmarshalList(b)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return each(l)
	})
}

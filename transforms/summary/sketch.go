package summary

import (
	"errors"
	"fmt"
	"math/bits"
)

// Sketch is a count-min sketch: Depth rows of Width counters (Width a power of
// two). Estimate never under-counts an item's total; sketches of disjoint
// event sets, or of disjoint key sets, add cell by cell.
type Sketch struct {
	Width, Depth int
	Cells        []uint64 // row-major, Depth*Width
}

// Limits a decoded sketch must respect.
const (
	MaxSketchWidth = 1 << 22
	MaxSketchDepth = 16
)

// NewSketch returns an empty sketch. It panics unless width is a power of two
// in [1, MaxSketchWidth] and depth is in [1, MaxSketchDepth].
func NewSketch(width, depth int) *Sketch {
	if err := checkSketchDims(width, depth); err != nil {
		panic(err)
	}
	return &Sketch{Width: width, Depth: depth, Cells: make([]uint64, width*depth)}
}

func checkSketchDims(width, depth int) error {
	if width < 1 || width > MaxSketchWidth || bits.OnesCount(uint(width)) != 1 {
		return fmt.Errorf("sketch width %d is not a power of two in [1, %d]", width, MaxSketchWidth)
	}
	if depth < 1 || depth > MaxSketchDepth {
		return fmt.Errorf("sketch depth %d outside [1, %d]", depth, MaxSketchDepth)
	}
	return nil
}

// cell returns the index of row i's counter for hash h (double hashing:
// h1 + i*h2 over the two halves of the 64-bit hash).
func (sk *Sketch) cell(h uint64, i int) int {
	h1, h2 := uint32(h), uint32(h>>32)|1
	return i*sk.Width + int((h1+uint32(i)*h2)&uint32(sk.Width-1))
}

// Add counts n occurrences of the item with hash h.
func (sk *Sketch) Add(h uint64, n uint64) {
	for i := 0; i < sk.Depth; i++ {
		sk.Cells[sk.cell(h, i)] += n
	}
}

// Estimate is an upper bound of the total count of the item with hash h.
func (sk *Sketch) Estimate(h uint64) uint64 {
	est := ^uint64(0)
	for i := 0; i < sk.Depth; i++ {
		est = min(est, sk.Cells[sk.cell(h, i)])
	}
	return est
}

// ErrSketchShape is returned when merging sketches of different dimensions.
var ErrSketchShape = errors.New("sketches of different shapes")

// Merge adds o into sk cell by cell.
func (sk *Sketch) Merge(o *Sketch) error {
	if sk.Width != o.Width || sk.Depth != o.Depth {
		return fmt.Errorf("%w: %dx%d and %dx%d", ErrSketchShape, sk.Depth, sk.Width, o.Depth, o.Width)
	}
	for i, c := range o.Cells {
		sk.Cells[i] += c
	}
	return nil
}

// Clone returns a deep copy.
func (sk *Sketch) Clone() *Sketch {
	return &Sketch{Width: sk.Width, Depth: sk.Depth, Cells: append([]uint64(nil), sk.Cells...)}
}

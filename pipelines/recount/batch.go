package recount

import (
	"encoding/binary"
	"errors"
	"slices"
)

// A batch is what crosses the recount's shuffles: thousands of records in
// one []byte, so that the runner handles a few hundred elements per hour,
// not millions, and the bytes it holds are few (Prism keeps every shuffle
// in memory, and copies it several times).
//
//	batch  = count (4 bytes, little-endian uint32: records in the batch) record*
//	string fields, by kind:
//	  dict = uvarint v; v even: the (v/2)-th literal of this batch's
//	         dictionary; v odd: a literal of v/2 bytes follows and is added
//	         to the dictionary (type, country, region: a handful of values)
//	  raw  = uvarint len, bytes (item)
//	  id   = uvarint v; v odd: v/2 bytes follow, the packed form of an id of
//	         2*(v/2) lowercase hex digits; v even: v/2 raw bytes follow
//
// The encoding of an id is a function of the id alone, so two records have
// the same event_id exactly when their encoded ids are equal.
const batchHeader = 4

// batchWriter appends records to one batch.
type batchWriter struct {
	buf  []byte
	n    uint32
	dict map[string]uint64
}

// len is the batch's size in bytes; 0 when it holds no record.
func (w *batchWriter) len() int {
	if w.n == 0 {
		return 0
	}
	return len(w.buf)
}

func (w *batchWriter) begin() {
	if w.buf == nil {
		w.buf = make([]byte, batchHeader, batchBytes+batchBytes/8)
		w.dict = make(map[string]uint64, 64)
	}
}

// end counts the record just written.
func (w *batchWriter) end() { w.n++ }

// take returns the batch and starts a new one.
func (w *batchWriter) take() []byte {
	b := w.buf
	binary.LittleEndian.PutUint32(b, w.n)
	w.buf, w.n = nil, 0
	clear(w.dict)
	return b
}

func (w *batchWriter) dictStr(s string) {
	if i, ok := w.dict[s]; ok {
		w.buf = binary.AppendUvarint(w.buf, i<<1)
		return
	}
	w.dict[s] = uint64(len(w.dict))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s))<<1|1)
	w.buf = append(w.buf, s...)
}

func (w *batchWriter) raw(s string) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *batchWriter) rawBytes(s []byte) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
	w.buf = append(w.buf, s...)
}

func (w *batchWriter) uvarint(v uint64) { w.buf = binary.AppendUvarint(w.buf, v) }

func (w *batchWriter) id(s string) {
	if len(s) == 0 || len(s)%2 != 0 || !lowerHex(s) {
		w.buf = binary.AppendUvarint(w.buf, uint64(len(s))<<1)
		w.buf = append(w.buf, s...)
		return
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(len(s)/2)<<1|1)
	n := len(w.buf)
	w.buf = slices.Grow(w.buf, len(s)/2)[:n+len(s)/2]
	dst := w.buf[n:]
	for i := range dst {
		dst[i] = unhex(s[2*i])<<4 | unhex(s[2*i+1])
	}
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// appendID appends the id an encoded id (as read by batchReader.id) stands for.
func appendID(dst, enc []byte) []byte {
	v, k := binary.Uvarint(enc)
	if v&1 == 0 {
		return append(dst, enc[k:]...)
	}
	const digits = "0123456789abcdef"
	for _, c := range enc[k:] {
		dst = append(dst, digits[c>>4], digits[c&15])
	}
	return dst
}

var errCorrupt = errors.New("exact: corrupt batch")

// collectBatches returns the batches of a grouped key (the runner has them
// in memory already; they are not copied) and the records they hold.
func collectBatches(iter func(*[]byte) bool) (batches [][]byte, records uint64, err error) {
	var b []byte
	for iter(&b) {
		if len(b) < batchHeader {
			return nil, 0, errCorrupt
		}
		batches = append(batches, b)
		records += uint64(binary.LittleEndian.Uint32(b))
		b = nil
	}
	return batches, records, nil
}

// batchReader reads the records of one batch, field by field, in the order
// they were written. Strings it returns point into the batch.
type batchReader struct {
	b    []byte
	pos  int
	left uint32
	dict []string
	err  error
}

func (r *batchReader) reset(b []byte) {
	r.b, r.pos, r.dict, r.err = b, batchHeader, r.dict[:0], nil
	if len(b) < batchHeader {
		r.b, r.left, r.err = nil, 0, errCorrupt
		return
	}
	r.left = binary.LittleEndian.Uint32(b)
}

// next reports whether another record follows (and counts it as read).
func (r *batchReader) next() bool {
	if r.err != nil || r.left == 0 {
		if r.err == nil && r.pos != len(r.b) {
			r.err = errCorrupt
		}
		return false
	}
	r.left--
	return true
}

func (r *batchReader) uvarint() uint64 {
	v, k := binary.Uvarint(r.b[r.pos:])
	if k <= 0 {
		r.fail()
		return 0
	}
	r.pos += k
	return v
}

func (r *batchReader) bytes(n uint64) []byte {
	if uint64(len(r.b)-r.pos) < n {
		r.fail()
		return nil
	}
	s := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s
}

func (r *batchReader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.pos = len(r.b)
}

func (r *batchReader) dictStr() string {
	v := r.uvarint()
	if v&1 == 1 {
		s := string(r.bytes(v >> 1))
		r.dict = append(r.dict, s)
		return s
	}
	if v>>1 >= uint64(len(r.dict)) {
		r.fail()
		return ""
	}
	return r.dict[v>>1]
}

func (r *batchReader) raw() []byte { return r.bytes(r.uvarint()) }

// id returns an encoded id (its length prefix included).
func (r *batchReader) id() []byte {
	start := r.pos
	v := r.uvarint()
	r.bytes(v >> 1)
	return r.b[start:r.pos]
}

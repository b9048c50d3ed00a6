package summary

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// AppendSet writes the documented format (keys sorted), EachInSet reads it
// back, and a SetWriter fed in key order writes the same bytes (Bytes in
// its own memory, AppendTo after dst's).
func TestSetFormat(t *testing.T) {
	sms := sampleSummaries(t)
	a, b := sms[0], sms[1]
	ea, _ := a.MarshalBinary()
	eb, _ := b.MarshalBinary()
	want := []byte{'T', 'L', 1, 2}
	for _, m := range []struct {
		k string
		e []byte
	}{{"list\x00a", ea}, {"list\x00b", eb}} {
		want = binary.AppendUvarint(want, uint64(len(m.k)))
		want = append(want, m.k...)
		want = binary.AppendUvarint(want, uint64(len(m.e)))
		want = append(want, m.e...)
	}
	got, err := AppendSet([]byte("x"), []string{"list\x00b", "list\x00a"}, []*Summary{b, a})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[1:], want) || got[0] != 'x' {
		t.Fatalf("AppendSet wrote %q, want %q", got, want)
	}
	var w SetWriter
	if err := w.Add("list\x00a", a); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("list\x00b", b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.AppendTo([]byte("y"))[1:], want) || !bytes.Equal(w.Bytes(), want) || w.Len() != 2 {
		t.Fatal("SetWriter differs from AppendSet")
	}
	var mixed SetWriter // one member added encoded
	if err := mixed.AddEncoded("list\x00a", ea); err != nil {
		t.Fatal(err)
	}
	if err := mixed.Add("list\x00b", b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mixed.Bytes(), want) {
		t.Fatal("SetWriter.AddEncoded differs from AppendSet")
	}
	if mixed.AddEncoded("list\x00b", eb) == nil || mixed.AddEncoded("list\x00a", ea) == nil {
		t.Fatal("SetWriter.AddEncoded took a repeated or out-of-order key")
	}
	var empty SetWriter
	if got, want := empty.Bytes(), []byte{'T', 'L', 1, 0}; !bytes.Equal(got, want) {
		t.Fatalf("empty SetWriter wrote %q, want %q", got, want)
	}
	if got, _ := AppendSet(nil, nil, nil); !bytes.Equal(got, empty.Bytes()) {
		t.Fatalf("empty AppendSet wrote %q", got)
	}
	if w.Add("list\x00b", b) == nil || w.Add("list\x00a", a) == nil {
		t.Fatal("SetWriter took a repeated or out-of-order key")
	}
	if _, err := AppendSet(nil, []string{"k", "k"}, []*Summary{a, b}); err == nil {
		t.Fatal("AppendSet took a key twice")
	}
	var keys []string
	err = EachInSet(want, func(k string, smb []byte) error {
		keys = append(keys, k)
		_, err := Unmarshal(smb)
		return err
	})
	if err != nil || len(keys) != 2 || keys[0] != "list\x00a" {
		t.Fatalf("EachInSet: %v %q", err, keys)
	}
}

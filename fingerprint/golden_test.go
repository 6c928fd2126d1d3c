package fingerprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// goldenCases pin the bytes Sum hashes: a fingerprint is stored with every
// record, so a change in what is hashed (field order, framing, the JSON
// test, the canonical form) turns every retry of a stored request into a
// mismatch. These digests were computed before Sum was last rewritten.
var goldenCases = []struct {
	method, target, ct, body string
	want                     string
}{
	{"POST", "/v1/orders", "application/json", `{"id":"ord_1","amount":2500,"currency":"eur","items":[{"sku":"a","qty":1}]}`, "1c13c9cc6c8b276dd072533ebf2c5b895672555a4a56f8ea6c9c00c80f2bf2da"},
	{"POST", "/v1/orders", "application/json; charset=utf-8", `{ "currency" : "eur", "id":"ord_1" }`, "3f69a6f39fa0c2e62cb6dda2f6cd01822345f382bc1cf0dccd27a54cb46ec1a3"},
	{"POST", "/v1/orders?x=1", "Application/JSON", `[1, 2.50, -3e2, true, null, "\u00e9"]`, "9c530660667402bece1a3f85c83d71566eda976e940cc1b91a8a5d52379ea670"},
	{"PUT", "/v1/orders/ord_1", "application/merge-patch+json", `{"status":"paid"}`, "6c1b42668217e86c56c77aaf69ea9bf322944c3714f2b378fbb81e7e6511216e"},
	{"POST", "/v1/upload", "text/plain", "hello, world\n", "22bbf9c1ceb97553211bf1492e355aef5a2afd82daaf27415b191eab5604ee36"},
	{"POST", "/v1/orders", "application/json", "  \n", "f44e9cc70173dde52ab5bb7a98da6630c52ccdf34319318a120f93ce39304fd1"},
	{"POST", "/v1/orders", "", `{"id":1}`, "8984338a3dbad1d6b123d21a1fa1af9c478dfbda92d8ad64810ead2ea6e6a067"},
	{"POST", "/v1/orders", "application/json;;", `{"id":1}`, "8984338a3dbad1d6b123d21a1fa1af9c478dfbda92d8ad64810ead2ea6e6a067"},
	{"DELETE", "/v1/orders/ord_1", "application/json", "", "da8efe90ea1dcfcd7d6eb1e5025f30cabc4965e0d29d5dbfb73746817c77f622"},
}

func TestSumIsStable(t *testing.T) {
	f, err := New(nil)
	require.NoError(t, err)
	for _, c := range goldenCases {
		got, err := f.Sum(c.method, c.target, c.ct, []byte(c.body))
		require.NoError(t, err)
		require.Equal(t, c.want, hex.EncodeToString(got[:]), "%s %s %q %q", c.method, c.target, c.ct, c.body)
	}
}

// reference is Sum computed the long way: a streaming hash over the
// documented fields, and Canonical from a fresh canonicaliser.
func reference(t *testing.T, f *Fingerprinter, method, target, ct string, body []byte) ([32]byte, error) {
	t.Helper()
	h := sha256.New()
	field := func(s string) {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	h.Write([]byte("oncekv/fp/1"))
	field(method)
	field(target)
	if !IsJSON(ct) || isBlank(body) {
		h.Write([]byte{kindBytes})
		h.Write(body)
	} else {
		out, err := f.Canonical(body)
		if err != nil {
			return [32]byte{}, err
		}
		h.Write([]byte{kindJSON})
		h.Write(out)
	}
	return [32]byte(h.Sum(nil)), nil
}

// Sum reuses pooled buffers from call to call: whatever came before, it
// hashes exactly the bytes the reference does, and an error leaves nothing
// behind for the next call.
func FuzzSumIsPure(f *testing.F) {
	for _, c := range goldenCases {
		f.Add(c.ct, []byte(c.body), []byte(`{"z":{"y":[{"x":1,"w":2}],"v":3},"u":4}`))
	}
	f.Add("application/json", []byte(`{"a":1,"A":2}`), []byte(`{"b":{"c":1}}`))
	f.Add("application/json", []byte(`{"a":{"b":`), []byte(`{"k":"v","j":"w"}`))
	fp, err := New(&Options{Exclude: []string{"meta.request_id"}, MaxDepth: 16})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, ct string, a, b []byte) {
		want, werr := reference(t, fp, "POST", "/v1/x", ct, a)
		for range 2 {
			got, err := fp.Sum("POST", "/v1/x", ct, a)
			if (err != nil) != (werr != nil) {
				t.Fatalf("Sum error %v, reference error %v", err, werr)
			}
			if err == nil && [32]byte(got) != want {
				t.Fatalf("Sum of %q differs from the reference", a)
			}
			_, _ = fp.Sum("PUT", "/v1/y", "application/json", b) // leaves its state in the pool
		}
	})
}

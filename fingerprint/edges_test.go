package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/fingerprint"
)

// Every prefix of a document, and the document with any one byte left
// out, is judged as encoding/json judges it: accepted exactly when valid
// (no panic at the end of the input, wherever it stops), and then
// canonicalised to valid JSON that canonicalises to itself.
func TestEveryTruncationAgreesWithEncodingJSON(t *testing.T) {
	t.Parallel()
	f, err := fingerprint.New(&fingerprint.Options{MaxDepth: 16})
	require.NoError(t, err)
	docs := []string{
		`{"a":[1,-2.5e+3,0.25E-1,true,false,null,"x\u00e9\n\ud83d\ude00\ud800"],"b":{"c":{},"d":[]},"e":-0}`,
		` [ { "k" : "v" } , [ ] , "\\\/\"" , 12 ] `,
		`-0.5E-2`,
		`"s\t"`,
	}
	check := func(in string) {
		t.Helper()
		out, err := f.Canonical([]byte(in))
		valid := json.Valid([]byte(in))
		switch {
		case valid && err != nil:
			t.Fatalf("rejected valid JSON %q: %v", in, err)
		case !valid && err == nil:
			t.Fatalf("accepted invalid JSON %q as %q", in, out)
		case !valid && !errors.Is(err, fingerprint.ErrInvalidJSON):
			t.Fatalf("invalid JSON %q: %v, want ErrInvalidJSON", in, err)
		case valid:
			require.True(t, json.Valid(out), "canonical form %q of %q", out, in)
			again, err := f.Canonical(out)
			require.NoError(t, err)
			require.Equal(t, string(out), string(again), "not idempotent: %q", in)
		}
	}
	for _, doc := range docs {
		for i := range len(doc) + 1 {
			check(doc[:i])
			if i < len(doc) {
				check(doc[:i] + doc[i+1:])
			}
		}
	}
}

// Member names that one case-insensitive decoder (encoding/json, Unicode
// simple folding as bytes.EqualFold) takes for one field are refused
// together, and only those, in small objects and in large ones (over 16
// members, where the check folds each name instead of comparing pairs).
func TestCaseFoldedDuplicatesMatchEqualFold(t *testing.T) {
	t.Parallel()
	f, err := fingerprint.New(nil)
	require.NoError(t, err)
	names := []string{
		"A", "a", "Z", "z", "@", "[", "`", "{", // the ends of the ASCII letters and their neighbours
		"k", "K", "\u212a", // KELVIN SIGN folds to k
		"s", "S", "\u017f", // LATIN SMALL LETTER LONG S folds to s
		"é", "É", "e",
		"ß", "\u1e9e", // CAPITAL SHARP S folds to ß
		"Σ", "σ", "ς",
		"\u01c4", "\u01c5", "\u01c6", // DŽ, Dž, dž: one orbit of three
		"\\ud800", "\\ud801", // lone surrogates, kept as escapes
	}
	for _, size := range []int{2, 16, 17, 40} {
		for i, a := range names {
			for _, b := range names[i+1:] {
				var body strings.Builder
				body.WriteString(`{"` + a + `":1,"` + b + `":2`)
				for n := 2; n < size; n++ {
					fmt.Fprintf(&body, `,"filler%d":%d`, n, n)
				}
				body.WriteString("}")
				_, err := f.Sum("POST", "/x", "application/json", []byte(body.String()))
				ua, _ := strconv.Unquote(`"` + a + `"`)
				ub, _ := strconv.Unquote(`"` + b + `"`)
				if bytes.EqualFold([]byte(ua), []byte(ub)) {
					require.ErrorIs(t, err, fingerprint.ErrDuplicateMember, "%d members: %q and %q", size, a, b)
				} else {
					require.NoError(t, err, "%d members: %q and %q", size, a, b)
				}
			}
		}
	}
}

// BodyType: the Content-Type, unless the body is encoded (then "", bytes);
// identity is no encoding.
func TestBodyType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		encoding, want string
	}{
		{"", "application/json"},
		{"identity", "application/json"},
		{" Identity ", "application/json"},
		{"gzip", ""},
		{"gzip, br", ""},
	} {
		h := http.Header{"Content-Type": {"application/json"}}
		if c.encoding != "" {
			h.Set("Content-Encoding", c.encoding)
		}
		require.Equal(t, c.want, fingerprint.BodyType(h), "Content-Encoding %q", c.encoding)
	}
}

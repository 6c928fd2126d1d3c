package fingerprint_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/fingerprint"
	"github.com/oncekv/oncekv/ledger"
)

func mustFP(t *testing.T, f *fingerprint.Fingerprinter, method, route, ct, body string) ledger.Fingerprint {
	t.Helper()
	s, err := f.Sum(method, route, ct, []byte(body))
	require.NoError(t, err)
	return s
}

func TestFingerprintCanonicalisation(t *testing.T) {
	t.Parallel()
	f, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts", "meta.request_id", "items.note"}})
	require.NoError(t, err)
	const ct = "application/json; charset=utf-8"
	base := `{"external_ref":"ord-1","amount_cents":2500,"currency":"eur","client_ts":"2026-01-01T00:00:00Z","meta":{"request_id":"r1","source":"app"},"items":[{"sku":"a","note":"x"}]}`
	want := mustFP(t, f, "POST", "/v1/orders", ct, base)

	same := map[string]string{
		"reordered keys":     `{"currency":"eur","amount_cents":2500,"external_ref":"ord-1","items":[{"note":"x","sku":"a"}],"meta":{"source":"app","request_id":"r1"},"client_ts":"2026-01-01T00:00:00Z"}`,
		"whitespace":         "{ \"external_ref\" : \"ord-1\",\n\t\"amount_cents\": 2500, \"currency\":\"eur\", \"client_ts\":\"2026-01-01T00:00:00Z\", \"meta\": {\"request_id\":\"r1\", \"source\":\"app\"}, \"items\": [ {\"sku\":\"a\",\"note\":\"x\"} ] }\n",
		"changed client_ts":  strings.Replace(base, "2026-01-01T00:00:00Z", "2027-05-05T05:05:05Z", 1),
		"dropped client_ts":  strings.Replace(base, `"client_ts":"2026-01-01T00:00:00Z",`, "", 1),
		"changed request_id": strings.Replace(base, `"request_id":"r1"`, `"request_id":"r2"`, 1),
		"changed array note": strings.Replace(base, `"note":"x"`, `"note":"y"`, 1),
		"escaped letters":    strings.Replace(base, `"eur"`, `"\u0065\u0075r"`, 1),
		"json type param":    base,
	}
	for name, body := range same {
		require.Equal(t, want, mustFP(t, f, "POST", "/v1/orders", ct, body), name)
	}
	require.Equal(t, want, mustFP(t, f, "POST", "/v1/orders", "application/vnd.api+json", base), "+json types are JSON")

	different := map[string]string{
		"amount":                  strings.Replace(base, "2500", "2501", 1),
		"number as written":       strings.Replace(base, "2500", "2500.0", 1),
		"exponent":                strings.Replace(base, "2500", "2.5e3", 1),
		"currency case":           strings.Replace(base, `"eur"`, `"EUR"`, 1),
		"meta.source":             strings.Replace(base, `"app"`, `"web"`, 1),
		"nested other":            strings.Replace(base, `"sku":"a"`, `"sku":"b"`, 1),
		"array order":             strings.Replace(base, `[{"sku":"a","note":"x"}]`, `[{"sku":"a","note":"x"},{"sku":"b"}]`, 1),
		"type change":             strings.Replace(base, "2500", `"2500"`, 1),
		"null vs missing":         strings.Replace(base, `"currency":"eur"`, `"currency":null`, 1),
		"excluded name elsewhere": strings.Replace(base, `"source":"app"`, `"source":"app","client_ts":"x"`, 1),
	}
	for name, body := range different {
		require.NotEqual(t, want, mustFP(t, f, "POST", "/v1/orders", ct, body), name)
	}
	require.NotEqual(t, want, mustFP(t, f, "PUT", "/v1/orders", ct, base), "method")
	require.NotEqual(t, want, mustFP(t, f, "POST", "/v1/refunds", ct, base), "route")
	require.NotEqual(t, want, mustFP(t, f, "POST", "/v1/orders", "text/plain", base), "JSON and bytes never collide")
}

func TestFingerprintNonJSONIsBytes(t *testing.T) {
	t.Parallel()
	f := &fingerprint.Fingerprinter{}
	a := mustFP(t, f, "POST", "/x", "text/plain", `{"b":1,"a":2}`)
	b := mustFP(t, f, "POST", "/x", "text/plain", `{"a":2,"b":1}`)
	require.NotEqual(t, a, b, "non-JSON bodies are hashed as bytes")
	require.Equal(t, a, mustFP(t, f, "POST", "/x", "", `{"b":1,"a":2}`))
	// Invalid JSON under a non-JSON type is fine; an empty JSON body is bytes.
	mustFP(t, f, "POST", "/x", "application/octet-stream", "{{{")
	mustFP(t, f, "POST", "/x", "application/json", "")
	// A blank body holds no value: its Content-Type does not count, its
	// bytes do.
	for _, body := range []string{"", "\r", " \n\t"} {
		require.Equal(t, mustFP(t, f, "POST", "/x", "", body), mustFP(t, f, "POST", "/x", "application/merge-patch+json", body), "%q", body)
	}
	require.NotEqual(t, mustFP(t, f, "POST", "/x", "application/json", " "), mustFP(t, f, "POST", "/x", "application/json", "\n"))
	require.True(t, a.Equal(a))
	require.False(t, a.Equal(b))
	require.Len(t, a.Short(), 12)
}

func TestFingerprintRejectsBadJSON(t *testing.T) {
	t.Parallel()
	f, err := fingerprint.New(&fingerprint.Options{MaxDepth: 8})
	require.NoError(t, err)
	bad := []string{
		`{`, `{"a":}`, `{"a" 1}`, `[1,]`, `{"a":1,}`, `01`, `1.`, `-`, `1e`, `tru`, `nul`, `"abc`,
		`"\x"`, `"\u12"`, "\"a\x01b\"", "\"\xff\"", `{} {}`, `{"a":1}x`, `{1:2}`,
	}
	for _, b := range bad {
		_, err := f.Sum("POST", "/x", "application/json", []byte(b))
		require.ErrorIs(t, err, fingerprint.ErrInvalidJSON, "%q", b)
	}
	deep := strings.Repeat("[", 9) + strings.Repeat("]", 9)
	_, err = f.Sum("POST", "/x", "application/json", []byte(deep))
	require.ErrorIs(t, err, fingerprint.ErrJSONTooDeep)
	_, err = f.Sum("POST", "/x", "application/json", []byte(strings.Repeat(`{"a":`, 100000)))
	require.ErrorIs(t, err, fingerprint.ErrJSONTooDeep)
	ok := strings.Repeat("[", 8) + strings.Repeat("]", 8)
	_, err = f.Sum("POST", "/x", "application/json", []byte(ok))
	require.NoError(t, err)
	// Objects count as arrays do: 8 levels pass, 9 do not.
	_, err = f.Sum("POST", "/x", "application/json", []byte(strings.Repeat(`{"a":`, 8)+"1"+strings.Repeat("}", 8)))
	require.NoError(t, err)
	_, err = f.Sum("POST", "/x", "application/json", []byte(strings.Repeat(`{"a":`, 9)+"1"+strings.Repeat("}", 9)))
	require.ErrorIs(t, err, fingerprint.ErrJSONTooDeep)

	_, err = fingerprint.New(&fingerprint.Options{Exclude: []string{"a..b"}})
	require.ErrorIs(t, err, fingerprint.ErrInvalidOptions)
}

func TestCanonicalForm(t *testing.T) {
	t.Parallel()
	f, _ := fingerprint.New(&fingerprint.Options{Exclude: []string{"x"}})
	cases := map[string]string{
		` { "b" : [ 1 , 2.50 , -0 , 1E+2 ] , "a" : { "d":true,"c":null } , "x": 9 } `: `{"a":{"c":null,"d":true},"b":[1,2.50,-0,1E+2]}`,
		`"\u00e9\n\t\u0001\"\\\/"`: "\"\u00e9\\n\\t\\u0001\\\"\\\\/\"",
		`"\ud83d\ude00"`:           "\"\U0001F600\"",
		`"\ud800"`:                 `"\ud800"`,
		`[]`:                       `[]`,
		`{}`:                       `{}`,
	}
	for in, want := range cases {
		got, err := f.Canonical([]byte(in))
		require.NoError(t, err, in)
		require.Equal(t, want, string(got), in)
	}
}

// member names; is idempotent; and produces valid JSON.
func FuzzCanonicalise(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null,"x\u0041"]}`, `[]`, `{}`, `"\ud83d\ude00"`, `-0.5e+10`,
		`{"a":{"b":{"c":[1,2,{"d":"e"}]}}}`, `{"client_ts":1,"meta":{"request_id":2}}`, `"\ud800"`,
		`{"\ud801":2,"\ud800":1}`, // one name to Go; the canonical form swapped them
	} {
		f.Add([]byte(s))
	}
	fp, _ := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts", "meta.request_id"}, MaxDepth: 32})
	plain, _ := fingerprint.New(&fingerprint.Options{MaxDepth: 32})
	f.Fuzz(func(t *testing.T, in []byte) {
		// The canonical form means to Go what the body means: the same
		// values, the same member winning where names repeat.
		if out, err := plain.Canonical(in); err == nil {
			if a, b := decodeAny(t, in), decodeAny(t, out); !reflect.DeepEqual(a, b) {
				t.Fatalf("%q decodes to %v, its canonical form %q to %v", in, a, out, b)
			}
		}
		out, err := fp.Canonical(in)
		if err != nil {
			if json.Valid(in) && utf8.Valid(in) && !errors.Is(err, fingerprint.ErrJSONTooDeep) && !errors.Is(err, fingerprint.ErrDuplicateMember) {
				t.Fatalf("rejected valid JSON %q: %v", in, err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q of %q is not JSON", out, in)
		}
		again, err := fp.Canonical(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %q -> %q -> %q (%v)", in, out, again, err)
		}
	})
}

// decodeAny is what encoding/json makes of a valid body, numbers as written.
func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return v
}

// encoding/json matches member names case-insensitively; the canonicaliser
// did not, so two bodies that decode to different amounts shared one
// fingerprint (issue 13, item 6). Objects whose member names collide under
// case folding are rejected.
func TestFingerprintRejectsCaseFoldedDuplicates(t *testing.T) {
	t.Parallel()
	f, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts"}})
	require.NoError(t, err)
	type order struct {
		AmountCents int `json:"amount_cents"`
	}
	for _, body := range []string{
		`{"amount_cents":100,"AMOUNT_CENTS":200}`,
		`{"AMOUNT_CENTS":200,"amount_cents":100}`,
		`{"amount_cents":100,"amount_cents":200}`,
		`{"a":{"Straße":1,"STRASSE":2,"straße":3}}`, // ß has no simple fold to SS; Straße/straße do collide
		`{"k":1,"\u212a":2}`,                        // KELVIN SIGN folds to k
		`{"client_ts":"a","Client_TS":"b"}`,         // an excluded member still collides
		`[{"x":1},{"y":1,"Y":2}]`,
		`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"b0":0,"b1":1,"b2":2,"b3":3,"b4":4,"b5":5,"b6":6,"B6":7}`,
		// Over 16 members names are folded, not compared in pairs; KELVIN
		// SIGN and LONG S slipped through there.
		`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"b0":0,"b1":1,"b2":2,"b3":3,"b4":4,"kind":"a","\u212aind":"b"}`,
		`{"a0":0,"a1":1,"a2":2,"a3":3,"a4":4,"a5":5,"a6":6,"a7":7,"a8":8,"a9":9,"b0":0,"b1":1,"b2":2,"b3":3,"b4":4,"\u017ftatus":"a","STATUS":"b"}`,
		// encoding/json reads every lone surrogate as U+FFFD.
		`{"\ud800":1,"\ud801":2}`,
		`{"x\udc00":1,"x\ufffd":2}`,
	} {
		_, err := f.Sum("POST", "/v1/orders", "application/json", []byte(body))
		require.ErrorIs(t, err, fingerprint.ErrInvalidJSON, body)
		require.ErrorIs(t, err, fingerprint.ErrDuplicateMember, body)
		require.ErrorContains(t, err, "case-insensitive")
	}
	// What Go would decode them to differs, which is why they cannot pass.
	var a, b order
	require.NoError(t, json.Unmarshal([]byte(`{"amount_cents":100,"AMOUNT_CENTS":200}`), &a))
	require.NoError(t, json.Unmarshal([]byte(`{"AMOUNT_CENTS":200,"amount_cents":100}`), &b))
	require.NotEqual(t, a, b)

	// Distinct names are fine, whatever their case; a long name is clipped
	// in the message.
	mustFP(t, f, "POST", "/v1/orders", "application/json", `{"amount":1,"amount_cents":2,"Amount_x":3}`)
	long := strings.Repeat("n", 5000)
	_, err = f.Sum("POST", "/x", "application/json", []byte(`{"`+long+`":1,"`+strings.ToUpper(long)+`":2}`))
	require.ErrorIs(t, err, fingerprint.ErrDuplicateMember)
	require.Less(t, len(err.Error()), 400, "the detail never echoes unbounded input")
}

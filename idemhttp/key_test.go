package idemhttp_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncekv/oncekv/idemhttp"
	"github.com/oncekv/oncekv/ledger"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	ok := map[string]string{
		"abc":                                  "abc",
		"  abc  ":                              "abc",
		`"abc"`:                                "abc",
		`"a\"b\\c"`:                            `a"b\c`,
		"550e8400-e29b-41d4-a716-446655440000": "550e8400-e29b-41d4-a716-446655440000",
		strings.Repeat("k", 255):               strings.Repeat("k", 255),
		`"` + strings.Repeat("k", 255) + `"`:   strings.Repeat("k", 255),
		"x":                                    "x",
	}
	for in, want := range ok {
		got, err := idemhttp.ParseKey(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	bad := []string{
		"", " ", `""`, strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, "a b", `"a b"`,
		"a\x00b", "ключ", "a\tb", `"abc`, `"abc"x`, `"a\nb"`, `"a\x"`, strings.Repeat("k", 40000), "\x7f",
	}
	for _, in := range bad {
		_, err := idemhttp.ParseKey(in)
		require.ErrorIs(t, err, ledger.ErrInvalidKey, "%q", in)
	}
}

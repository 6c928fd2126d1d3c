package fingerprint

import (
	"bytes"
	"testing"
	"unicode"
	"unicode/utf8"
)

// foldKey maps every rune to the least rune of its simple-folding orbit,
// for all of Unicode, so two names fold alike exactly when bytes.EqualFold
// says they match: the check of large objects and of small ones agree.
func TestFoldKeyIsTheLeastOfEachOrbit(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		got := foldKey(nil, utf8.AppendRune(nil, r))
		if want := utf8.AppendRune(nil, least); !bytes.Equal(got, want) {
			t.Fatalf("foldKey(%U) = %q, want %q (%U)", r, got, want, least)
		}
	}
	// Bytes that are not UTF-8 (lone surrogate marks) pass as they are.
	if got := foldKey(nil, []byte{loneSurrogateMark, 0xd8, 0x00, 'a'}); !bytes.Equal(got, []byte{loneSurrogateMark, 0xd8, 0x00, 'A'}) {
		t.Fatalf("foldKey of a mark: %q", got)
	}
}
